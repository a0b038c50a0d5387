"""Backends: the seam (base.py) and one package per inference compiler."""
