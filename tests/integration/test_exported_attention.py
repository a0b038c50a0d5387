"""Attention as today's PyTorch exporters write it (torch.onnx.export with dynamo and without): scaled dot-product
attention with a mask comes out as Softmax -> IsNaN/Where -> MatMul, which tuner.inputs.attention finds, so the
transformer variants are ordered as a transformer's (they are built wherever a Softmax meets a MatMul)."""
import onnx
import pytest
from needs import torch_or_skip

from tuner.inputs.attention import attention_softmaxes, may_have_attention


@pytest.mark.parametrize("dynamo", [False, True])
def test_attention_of_both_pytorch_exporters_is_found(tmp_path, dynamo):
    torch = torch_or_skip()

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(16, 16) for _ in range(3))

        def forward(self, x, mask):
            q, k, v = (f(x).view(2, 8, 2, 8).transpose(1, 2) for f in (self.q, self.k, self.v))
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :].bool())

    torch.manual_seed(0)
    path = str(tmp_path / "block.onnx")
    torch.onnx.export(Block().eval(), (torch.randn(2, 8, 16), torch.ones(2, 8, dtype=torch.int64)), path,
                      input_names=["x", "mask"], opset_version=18 if dynamo else 17, dynamo=dynamo)
    model = onnx.load(path)
    ops = [n.op_type for n in model.graph.node]
    softmax = ops.index("Softmax")
    assert {"IsNaN", "Where"} <= set(ops[softmax:])  # the guard of fully masked rows, after the Softmax
    assert len(attention_softmaxes(model.graph)) == 1 and may_have_attention(model)
