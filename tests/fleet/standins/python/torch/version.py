"""torch.version: the CUDA toolkit PyTorch was built with (torch/version.py is generated at build time; ``cuda`` is
"13.0" in the cu130 wheels a DGX Spark's images carry)."""

cuda = "13.0"
