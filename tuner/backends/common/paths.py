"""Folder names for the backends' caches."""
from __future__ import annotations

import re


def slug(text: str) -> str:
    """A version, GPU or study name as one safe folder name: "NVIDIA H100 80GB" -> "nvidia-h100-80gb"."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "x"
