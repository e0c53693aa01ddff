"""ONNX Runtime: the local embedder and its int8 copy."""
