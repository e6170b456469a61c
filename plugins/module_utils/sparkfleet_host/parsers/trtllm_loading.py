"""What TensorRT-LLM's PyTorch backend logs while it loads a model: evidence of the model it really loaded.

The report's ``Model:`` and ``Model Path:`` lines repeat trtllm-bench's own ``--model``/``--model_path``
arguments, so they cannot show that the argument was used. These lines come from the loading itself:

* ``Prefetching {size / 2**30:.2f}GB checkpoint files.`` and ``Prefetching {file} to memory...``:
  the total size of the ``*.safetensors`` files globbed in the checkpoint directory and each file read
  (tensorrt_llm/_torch/models/checkpoints/hf/weight_loader.py, ``HfWeightLoader.load_weights`` and
  ``_prefetch_one_file``, commits 02086d89ee95f725414743a33a436473604202e9 and older; prefetching happens
  when the files fit in 90% of the available host memory);
* ``Start to load safetensor file {file}`` (same file, ``_load_safetensors_file``);
* ``Use {bytes / 2**30:.2f} GB for model weights.``: parameters and buffers of the model built on this
  rank's GPU (tensorrt_llm/_torch/pyexecutor/model_loader.py, ``ModelLoader.load``, commit
  004b733e0ed7c03c83dcfa7de48e8ee6e4fa58d0);
* ``Number of attention layers: {n}``: from the model's config, when trtllm-bench's tuning heuristic
  sizes the batch (tensorrt_llm/bench/build/tuning.py ``calc_engine_setting``, commit
  04cba882084a25665e7f80f5bda71b35b9790b6f); kept for the record, not compared (hybrid models have fewer
  attention layers than hidden layers).

The report's ``Dtype:`` and ``Quantization:`` (PyTorch backend) are read by the engine from the
checkpoint's config (``ModelConfig.from_pretrained(model_path or model)`` in
tensorrt_llm/bench/dataclasses/reporting.py, commit 0249976575050d2c624a5f285683c66de311a3b7); the text
report parser keeps them with the model path.
"""

from __future__ import annotations

import re

from .trtllm_report import strip_log_prefix

_GIB = float(1 << 30)
_CHECKPOINT = re.compile(r"^Prefetching\s+([0-9.]+)\s*GB\s+checkpoint files\.?\s*$")
_PREFETCH_FILE = re.compile(r"^Prefetching\s+(\S.*?)\s+to memory\.*\s*$")
_LOAD_FILE = re.compile(r"^Start to load safetensor file\s+(\S.*?)\s*$")
_WEIGHTS = re.compile(r"^Use\s+([0-9.]+)\s*GB for model weights\.?\s*$")
_ATTENTION_LAYERS = re.compile(r"^Number of attention layers:\s*(\d+)\s*$")


def parse_loading_lines(text: str) -> dict:
    """The loading evidence in a log: checkpoint_bytes, weight_files, weights_bytes (one rank's),
    num_attention_layers; keys absent where the log lacks the line. The last load in the log wins."""
    found: dict = {}
    files: list[str] = []
    for raw in text.splitlines():
        if "GB" not in raw and "safetensor" not in raw and "attention layers" not in raw:
            continue
        line = strip_log_prefix(raw).strip()
        match = _CHECKPOINT.match(line)
        if match:
            found["checkpoint_bytes"] = float(match.group(1)) * _GIB
            files = []  # a new load starts
            continue
        match = _PREFETCH_FILE.match(line) or _LOAD_FILE.match(line)
        if match:
            name = match.group(1)
            if name.endswith(".safetensors") and name not in files:
                files.append(name)
            continue
        match = _WEIGHTS.match(line)
        if match:
            found["weights_bytes"] = float(match.group(1)) * _GIB
            continue
        match = _ATTENTION_LAYERS.match(line)
        if match:
            found["num_attention_layers"] = int(match.group(1))
    if files:
        found["weight_files"] = files
    return found
