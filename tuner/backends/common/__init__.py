"""What several backends share, so that none imports another's internals: ONNX precision rewrites (fp16,
bf16, int8 Q/DQ; the GPU backends parse the rewritten graph), ONNX Runtime's calibration helpers (its
quantizers calibrate for the CPU backend and for the Q/DQ rewrite), bf16 bit conversions, the CUDA runtime
wrapper, and folder names for caches."""
