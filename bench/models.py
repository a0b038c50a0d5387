"""Benchmark models built offline: a BERT-style encoder (transformers' BertModel with random weights,
fixed seed: 6 layers, hidden 384, 12 heads, sequence 128) exported to ONNX, the demo model with
planted outliers, and the real-weight PP-OCRv4 models (bench/fetch_models.py). Needs the `bench`
extra (torch, transformers) for BERT: pip install torch==2.13.0 transformers

  python bench/models.py bert     # prints the path (bench/models/bert-6x384.onnx)
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.join(HERE, "models")
BERT_SEQ = 128
BERT_VOCAB = 30522


def bert_model(seed: int = 0) -> str:
    path = os.path.join(MODELS_DIR, "bert-6x384.onnx")
    if os.path.isfile(path):
        return path
    try:
        import torch
        from transformers import BertConfig, BertModel
    except ImportError:
        raise SystemExit("the BERT model needs torch and transformers: pip install torch==2.13.0 transformers") from None
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

    ids = torch.randint(0, BERT_VOCAB, (1, BERT_SEQ))
    os.makedirs(MODELS_DIR, exist_ok=True)
    torch.onnx.export(Encoder(model), (ids,), path, input_names=["input_ids"], output_names=["hidden"],
                      dynamic_axes={"input_ids": {0: "batch"}, "hidden": {0: "batch"}}, opset_version=17, dynamo=False)
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["bert"]:
        print(bert_model())
    else:
        raise SystemExit("usage: python bench/models.py bert")
