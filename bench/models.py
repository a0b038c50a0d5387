"""Benchmark models built offline, random weights with a fixed seed, exported to ONNX:
ResNet-18 and MobileNetV3-Small (the torchvision layer layouts, written out in bench/vision.py because
the registry's torchvision wheel is linked against CUDA torch and does not import with the CPU build),
and a BERT-style encoder (transformers' BertModel: 6 layers, hidden 384, 12 heads, sequence 128).
Real weights: `minilm`, the sentence encoder paraphrase-MiniLM-L3-v2 with real sentences as inputs
(bench/encoder.py), and `ocr-rec`, PP-OCRv4's text recognizer from the rapidocr-onnxruntime wheel with
rendered text lines as inputs (bench/fetch_models.py). The demo model (tuner.cli.demo) and the PP-OCRv4
models need no torch. Needs the
`bench` extra: pip install -e ".[bench]"   (torch==2.13.0 is a CPU build)

  python bench/models.py bert           # prints the path (bench/models/bert-6x384.onnx)
  python bench/models.py resnet18 mobilenetv3 minilm ocr-rec
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.join(HERE, "models")
BERT_SEQ = 128
BERT_VOCAB = 30522


def _torch():
    try:
        import torch
    except ImportError:
        raise SystemExit('the benchmark models need the bench extra: pip install -e ".[bench]"') from None
    return torch


def _export(module, example, path: str, input_name: str, output_name: str) -> str:
    torch = _torch()
    os.makedirs(MODELS_DIR, exist_ok=True)
    tmp = path + ".part"  # a killed export leaves no half-written model behind
    with torch.no_grad():
        torch.onnx.export(module, (example,), tmp, input_names=[input_name], output_names=[output_name],
                          dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}}, opset_version=17,
                          dynamo=False)
    os.replace(tmp, path)
    return path


def vision_model(arch: str, seed: int = 0) -> str:
    """resnet18 or mobilenet_v3_small, random weights (seeded), input 1x3x224x224, logits out."""
    path = os.path.join(MODELS_DIR, f"{arch}.onnx")
    if os.path.isfile(path):
        return path
    torch = _torch()
    import vision

    torch.manual_seed(seed)
    model = vision.ARCHS[arch]()
    vision.settle_batchnorm(model, torch.randn(8, 3, 224, 224))
    return _export(model.eval(), torch.randn(1, 3, 224, 224), path, "x", "logits")


def bert_model(seed: int = 0) -> str:
    path = os.path.join(MODELS_DIR, "bert-6x384.onnx")
    if os.path.isfile(path):
        return path
    torch = _torch()
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        raise SystemExit('the BERT model needs the bench extra: pip install -e ".[bench]"') from None
    torch.manual_seed(seed)
    config = BertConfig(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536,
                        vocab_size=BERT_VOCAB, max_position_embeddings=512)
    model = BertModel(config).eval()

    class Encoder(torch.nn.Module):  # one input, one output: the last hidden state
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    return _export(Encoder(model), torch.randint(0, BERT_VOCAB, (1, BERT_SEQ)), path, "input_ids", "hidden")


def minilm_model() -> str:
    import encoder

    return encoder.minilm_model()[0]


def ocr_rec_model() -> str:
    import fetch_models

    return fetch_models.ocr_model("ocr-rec")


BUILDERS = {"bert": bert_model, "resnet18": lambda: vision_model("resnet18"),
            "mobilenetv3": lambda: vision_model("mobilenet_v3_small"), "minilm": minilm_model, "ocr-rec": ocr_rec_model}


if __name__ == "__main__":
    names = sys.argv[1:]
    if not names or any(n not in BUILDERS for n in names):
        raise SystemExit(f"usage: python bench/models.py {{{','.join(BUILDERS)}}} ...")
    for n in names:
        print(BUILDERS[n]())
