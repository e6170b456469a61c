# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: the engine registry and launch commands, the load generators,
provenance, TensorRT-LLM's CLI, tokenizers and model cards."""
