#!/usr/bin/env python3
"""Stand-in for TensorRT-LLM's standalone ``benchmarks/cpp/prepare_dataset.py`` (tests only, stdlib only).

The test image carries it at /app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py, where the release images
have the real one (docker/Dockerfile.multi @00f74add copies benchmarks/ there). Its command line is the
real script's click group (NVIDIA/TensorRT-LLM benchmarks/cpp/prepare_dataset.py, the version with
``--stdout``, ``--lora-dir`` and ``--trust-remote-code``; subcommands from
benchmarks/cpp/utils/prepare_synthetic_data.py @084703ee), checked against the image version's tree in
tests/data/trtllm-cli (the same check the trtllm-bench stand-in makes; exit 2 with click's wording).

    python3 prepare_dataset.py --tokenizer DIR [--stdout | --output FILE] [--random-seed N]
        token-norm-dist --num-requests N --input-mean I --input-stdev S --output-mean O --output-stdev S

``--stdout`` prints one JSON request per line (``print_text_dataset``: task_id, input_ids, output_tokens),
the format trtllm-bench reads; without it a JSON document with metadata and samples goes to ``--output``
(``text_dataset_dump``; its exact key set is approximated here). The tokenizer must be a local directory:
``AutoTokenizer.from_pretrained`` reaches no Hub from a test host.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import sys
from pathlib import Path

PROG = "prepare_dataset.py"


def _bench_standin():
    """The trtllm-bench stand-in beside it (image: /usr/local/bin; repository: this directory): its version
    lookup and its click-style check of a command tree."""
    here = Path(__file__).resolve().parent / "trtllm-bench"
    path = str(here) if here.exists() else shutil.which("trtllm-bench")
    loader = importlib.machinery.SourceFileLoader("trtllm_bench_standin", path)
    spec = importlib.util.spec_from_loader("trtllm_bench_standin", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _option(argv: list[str], name: str, default=None):
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def _lengths(mean: int, stdev: int, count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [max(1, round(rng.gauss(mean, stdev)) if stdev else mean) for _ in range(count)]


def main(argv: list[str]) -> int:
    bench = _bench_standin()
    problem = bench.check_cli(bench.cli_tree(bench.version(), PROG), PROG, argv)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    tokenizer = _option(argv, "--tokenizer")
    if not os.path.isdir(tokenizer):
        print("Traceback (most recent call last):\n  File \"prepare_dataset.py\", line 1, in <module>\n"
              "ValueError: Cannot find a tokenizer from the given string because of We couldn't connect to "
              "'https://huggingface.co' to load the files, and couldn't find them in the cached files.\n"
              "Please set tokenizer to the directory that contains the tokenizer, or set to a model name in "
              f"HuggingFace. (tokenizer: {tokenizer!r})", file=sys.stderr)
        return 1
    command = next(a for a in argv if a in ("token-norm-dist", "token-unif-dist", "dataset"))
    if command != "token-norm-dist":
        print(f"stand-in: {command} is not modelled", file=sys.stderr)
        return 1
    seed = int(_option(argv, "--random-seed", 420))
    count = int(_option(argv, "--num-requests"))
    isl = _lengths(int(_option(argv, "--input-mean")), int(_option(argv, "--input-stdev")), count, seed)
    osl = _lengths(int(_option(argv, "--output-mean")), int(_option(argv, "--output-stdev")), count, seed)
    rows = [{"task_id": t, "input_ids": [(t * 7919 + k * 31) % 32000 + 1 for k in range(i)], "output_tokens": o}
            for t, (i, o) in enumerate(zip(isl, osl, strict=True))]
    if "--stdout" in argv:
        for row in rows:
            print(json.dumps(row, separators=(",", ":")))
        return 0
    metadata = {"workload_type": command, "num_requests": count, "tokenize_vocabsize": 32000,
                "max_input_len": max(isl), "max_output_len": max(osl)}
    samples = [{"input_len": len(r["input_ids"]), "input_ids": r["input_ids"], "output_len": r["output_tokens"],
                "task_id": -1} for r in rows]
    Path(_option(argv, "--output", "preprocessed_dataset.json")).write_text(
        json.dumps({"metadata": metadata, "samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
