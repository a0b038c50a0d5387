"""ResNet-18 and MobileNetV3-Small in plain torch, with the layer layout of torchvision's models
(same parameter counts: 11,689,512 and 2,542,856), for random-weight benchmarks."""
from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = None,
             eps: float = 1e-5) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, cout, 3, stride, act=nn.ReLU), _conv_bn(cout, cout, 3))
        self.shortcut = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18(num_classes: int = 1000) -> nn.Module:
    layers = [_conv_bn(3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def _divisible(v: float, d: int = 8) -> int:
    out = max(d, int(v + d / 2) // d * d)
    return out + d if out < 0.9 * v else out


class SqueezeExcite(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        s = _divisible(c // 4)
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, s, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(s, c, 1), nn.Hardsigmoid(inplace=True))

    def forward(self, x):
        return x * self.gate(x)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool, act: type, stride: int):
        super().__init__()
        eps = 1e-3
        layers = [] if expanded == cin else [_conv_bn(cin, expanded, 1, act=act, eps=eps)]
        layers.append(_conv_bn(expanded, expanded, k, stride, groups=expanded, act=act, eps=eps))
        if se:
            layers.append(SqueezeExcite(expanded))
        layers.append(_conv_bn(expanded, cout, 1, eps=eps))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


# (in, kernel, expanded, out, squeeze-excite, activation, stride): MobileNetV3-Small, Howard et al. 2019, table 2
_MNV3_SMALL = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2), (24, 3, 88, 24, False, nn.ReLU, 1),
               (24, 5, 96, 40, True, nn.Hardswish, 2), (40, 5, 240, 40, True, nn.Hardswish, 1),
               (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 120, 48, True, nn.Hardswish, 1),
               (48, 5, 144, 48, True, nn.Hardswish, 1), (48, 5, 288, 96, True, nn.Hardswish, 2),
               (96, 5, 576, 96, True, nn.Hardswish, 1), (96, 5, 576, 96, True, nn.Hardswish, 1)]


def mobilenet_v3_small(num_classes: int = 1000) -> nn.Module:
    layers = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish, eps=1e-3)]
    layers += [InvertedResidual(*cfg) for cfg in _MNV3_SMALL]
    layers += [_conv_bn(96, 576, 1, act=nn.Hardswish, eps=1e-3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2), nn.Linear(1024, num_classes)]
    return nn.Sequential(*layers)


ARCHS = {"resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small}


def settle_batchnorm(model: nn.Module, batch: torch.Tensor) -> None:
    """Set BatchNorm running statistics from data, as training would: with random weights and the
    initial statistics (mean 0, var 1) activations grow or vanish layer by layer."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the batches below
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(batch)
    model.eval()
