# sgl-project/sglang python/sglang/version.py: one literal, which the package's __init__ re-exports and sparkfleet
# reads as text (serving_provenance.PY_VERSION); the same default as openai_server.DEFAULT_VERSIONS["sglang"].
__version__ = "0.5.4"
