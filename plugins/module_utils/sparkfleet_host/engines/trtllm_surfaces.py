# -*- coding: utf-8 -*-
"""The captured trtllm-bench surfaces: each the command tree of one TensorRT-LLM release line, as transcribed
from upstream's click sources into tests/data/trtllm-cli/<name>.json (which names every file and commit and
says how exactly each is pinned), less those notes. Generated from those files by
``python tests/fleet/trtllm_sources.py > plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py``; the contract
test (tests/unit/plugins/plugin_utils/test_trtllm_cli_contract.py) fails when this module and the files differ.
Release lines differ little, so the first surface is written whole and each later one as its changes from an
earlier one; SURFACES, rebuilt from them at import, is each tree whole.

A run builds its commands from the image's own CLI (trtllm_cli.detect); these serve where that cannot be read:
an offline ``sparkfleet plan``, an image whose sources are laid out otherwise.
"""

import copy

#: A change's value for a key it removes (None is a value here: a command whose options were not transcribed).
DROPPED = "<dropped>"
#: A change's key for its dict's new key order, where that is not the old order with new keys last.
ORDER = "<order>"


def _changed(old, change):
    """``old`` with ``change`` applied: a dict into a dict key by key (as a JSON merge patch), else replacing."""
    if not isinstance(old, dict) or not isinstance(change, dict):
        return change
    new = dict(old)
    for key, value in change.items():
        if value == DROPPED:
            del new[key]
        elif key != ORDER:
            new[key] = _changed(old.get(key), value)
    return {key: new[key] for key in change.get(ORDER, new)}


def _rebuilt(first, changes):
    """``first``, then each of ``changes`` (the name of an earlier surface, the change to it) applied."""
    built = [first]
    for base, change in changes:
        built.append(_changed(next(s for s in built if s["name"] == base), change))
    return tuple(copy.deepcopy(built))  # no surface shares a part with another, as when each was written whole


# fmt: off
FIRST = {
    "name": "1.1.0rc3",
    "pattern": "1\\.1\\.0rc3(\\.post[0-9]+)?",
    "floor": "1.1.0rc3",
    "example": "1.1.0rc3",
    "data": "tests/data/trtllm-cli/1.1.0rc3.json",
    "programs": {
        "trtllm-bench": {
            "options": {
                "--model": {"type": "str", "required": True, "aliases": ["-m"]},
                "--model_path": {"type": "path"},
                "--workspace": {"type": "path", "aliases": ["-w"]},
                "--log_level": {"type": "str"},
                "--revision": {"type": "str"},
            },
            "commands": {
                "build": {"options": None},
                "throughput": {
                    "options": {
                        "--engine_dir": {"type": "path"},
                        "--backend": {"type": "choice", "choices": ["pytorch", "_autodeploy", "tensorrt"]},
                        "--custom_module_dirs": {"type": "path", "multiple": True},
                        "--extra_llm_api_options": {"type": "str"},
                        "--sampler_options": {"type": "path"},
                        "--max_batch_size": {"type": "int"},
                        "--max_num_tokens": {"type": "int"},
                        "--max_seq_len": {"type": "int"},
                        "--beam_width": {"type": "int"},
                        "--kv_cache_free_gpu_mem_fraction": {"type": "float"},
                        "--dataset": {"type": "path"},
                        "--no_skip_tokenizer_init": {"type": "flag"},
                        "--eos_id": {"type": "int"},
                        "--modality": {"type": "choice", "choices": ["image", "video"]},
                        "--image_data_format": {"type": "choice", "choices": ["pt", "pil"]},
                        "--data_device": {"type": "choice", "choices": ["cuda", "cpu"]},
                        "--max_input_len": {"type": "int"},
                        "--num_requests": {"type": "int"},
                        "--warmup": {"type": "int"},
                        "--target_input_len": {"type": "int"},
                        "--target_output_len": {"type": "int"},
                        "--tp": {"type": "int"},
                        "--pp": {"type": "int"},
                        "--ep": {"type": "int"},
                        "--cluster_size": {"type": "int"},
                        "--concurrency": {"type": "int"},
                        "--streaming": {"type": "flag"},
                        "--report_json": {"type": "path"},
                        "--iteration_log": {"type": "path"},
                        "--output_json": {"type": "path"},
                        "--request_json": {"type": "path"},
                        "--enable_chunked_context": {"type": "flag"},
                        "--disable_chunked_context": {"type": "flag"},
                        "--scheduler_policy": {"type": "choice", "choices": ["guaranteed_no_evict", "max_utilization"]},
                    },
                },
                "latency": {
                    "options": {
                        "--engine_dir": {"type": "path"},
                        "--backend": {"type": "choice", "choices": ["pytorch", "_autodeploy", "tensorrt"]},
                        "--kv_cache_free_gpu_mem_fraction": {"type": "float"},
                        "--max_seq_len": {"type": "int"},
                        "--dataset": {"type": "path"},
                        "--modality": {"type": "choice", "choices": ["image", "video"]},
                        "--max_input_len": {"type": "int"},
                        "--num_requests": {"type": "int"},
                        "--warmup": {"type": "int"},
                        "--tp": {"type": "int"},
                        "--pp": {"type": "int"},
                        "--ep": {"type": "int"},
                        "--beam_width": {"type": "int"},
                        "--concurrency": {"type": "int"},
                        "--medusa_choices": {"type": "path"},
                        "--report_json": {"type": "path"},
                        "--iteration_log": {"type": "path"},
                    },
                },
            },
        },
        "prepare_dataset.py": {
            "path": "/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py",
            "interpreter": "python3",
            "options": {
                "--tokenizer": {"type": "str", "required": True},
                "--output": {"type": "str"},
                "--stdout": {"type": "flag"},
                "--random-seed": {"type": "int"},
                "--task-id": {"type": "int"},
                "--rand-task-id": {"type": "int", "nargs": 2},
                "--lora-dir": {"type": "str"},
                "--log-level": {"type": "choice", "choices": ["info", "debug"]},
                "--trust-remote-code": {"type": "flag"},
            },
            "commands": {
                "token-norm-dist": {
                    "options": {
                        "--num-requests": {"type": "int", "required": True},
                        "--input-mean": {"type": "int", "required": True},
                        "--input-stdev": {"type": "int", "required": True},
                        "--output-mean": {"type": "int", "required": True},
                        "--output-stdev": {"type": "int", "required": True},
                    },
                },
                "token-unif-dist": {
                    "options": {
                        "--num-requests": {"type": "int", "required": True},
                        "--input-min": {"type": "int", "required": True},
                        "--input-max": {"type": "int", "required": True},
                        "--output-min": {"type": "int", "required": True},
                        "--output-max": {"type": "int", "required": True},
                    },
                },
                "dataset": {"options": None},
            },
        },
    },
}
CHANGES = (
    ("1.1.0rc3", {
        "name": "1.2.0rc6",
        "pattern": "1\\.2\\.0rc6(\\.post[0-9]+)?",
        "floor": "1.2.0rc6",
        "example": "1.2.0rc6",
        "data": "tests/data/trtllm-cli/1.2.0rc6.json",
        "programs": {
            "trtllm-bench": {
                "commands": {
                    "latency": {
                        "options": {"--extra_llm_api_options": {"type": "str"}, "--sampler_options": {"type": "path"}},
                    },
                },
            },
        },
    }),
    ("1.2.0rc6", {
        "name": "1.2.0rc8",
        "pattern": "1\\.2\\.0rc8(\\.post[0-9]+)?",
        "floor": "1.2.0rc8",
        "example": "1.2.0rc8",
        "data": "tests/data/trtllm-cli/1.2.0rc8.json",
        "programs": {
            "trtllm-bench": {
                "commands": {
                    "prepare-dataset": {
                        "options": {
                            "--output": {"type": "str"},
                            "--random-seed": {"type": "int"},
                            "--task-id": {"type": "int"},
                            "--rand-task-id": {"type": "int", "nargs": 2},
                            "--lora-dir": {"type": "str"},
                            "--log-level": {"type": "choice", "choices": ["info", "debug"]},
                            "--trust-remote-code": {"type": "flag"},
                        },
                        "commands": {
                            "token-norm-dist": {
                                "options": {
                                    "--num-requests": {"type": "int", "required": True},
                                    "--input-mean": {"type": "int", "required": True},
                                    "--input-stdev": {"type": "int", "required": True},
                                    "--output-mean": {"type": "int", "required": True},
                                    "--output-stdev": {"type": "int", "required": True},
                                },
                            },
                            "token-unif-dist": {
                                "options": {
                                    "--num-requests": {"type": "int", "required": True},
                                    "--input-min": {"type": "int", "required": True},
                                    "--input-max": {"type": "int", "required": True},
                                    "--output-min": {"type": "int", "required": True},
                                    "--output-max": {"type": "int", "required": True},
                                },
                            },
                            "real-dataset": {"options": None},
                        },
                    },
                },
            },
        },
    }),
    ("1.2.0rc8", {
        "name": "1.2.1",
        "pattern": "1\\.2\\.[0-9]+(\\.post[0-9]+)?",
        "floor": "1.2.0",
        "example": "1.2.1",
        "data": "tests/data/trtllm-cli/1.2.1.json",
    }),
    ("1.2.1", {
        "name": "1.3.0rc2x",
        "pattern": "1\\.3\\.0rc[2-9][0-9](\\.post[0-9]+)?",
        "floor": "1.3.0rc20",
        "example": "1.3.0rc29",
        "data": "tests/data/trtllm-cli/1.3.0rc2x.json",
        "programs": {
            "prepare_dataset.py": "<dropped>",
            "trtllm-bench": {
                "options": {"--telemetry": {"type": "flag"}, "--no-telemetry": {"type": "flag"}},
                "commands": {
                    "build": "<dropped>",
                    "throughput": {
                        "options": {
                            "--extra_llm_api_options": "<dropped>",
                            "--backend": {"choices": "<dropped>", "type": "str"},
                            "--config": {"type": "str", "aliases": ["--extra_llm_api_options"]},
                            "--custom_tokenizer": {"type": "str"},
                            "--sim": {"type": "flag"},
                            "--sim-config": {"type": "path"},
                            "<order>": [
                                "--engine_dir", "--backend", "--custom_module_dirs", "--config", "--sampler_options",
                                "--max_batch_size", "--max_num_tokens", "--max_seq_len", "--beam_width",
                                "--kv_cache_free_gpu_mem_fraction", "--dataset", "--no_skip_tokenizer_init",
                                "--custom_tokenizer", "--eos_id", "--modality", "--image_data_format", "--data_device",
                                "--max_input_len", "--num_requests", "--warmup", "--target_input_len",
                                "--target_output_len", "--tp", "--pp", "--ep", "--cluster_size", "--concurrency",
                                "--streaming", "--report_json", "--iteration_log", "--output_json", "--request_json",
                                "--enable_chunked_context", "--disable_chunked_context", "--scheduler_policy", "--sim",
                                "--sim-config",
                            ],
                        },
                    },
                    "latency": {
                        "options": {
                            "--extra_llm_api_options": "<dropped>",
                            "--config": {"type": "str", "aliases": ["--extra_llm_api_options"]},
                            "--backend": {"choices": "<dropped>", "type": "str"},
                            "<order>": [
                                "--engine_dir", "--config", "--backend", "--kv_cache_free_gpu_mem_fraction",
                                "--max_seq_len", "--dataset", "--modality", "--max_input_len", "--num_requests",
                                "--warmup", "--tp", "--pp", "--ep", "--beam_width", "--sampler_options",
                                "--concurrency", "--medusa_choices", "--report_json", "--iteration_log",
                            ],
                        },
                    },
                    "visual-gen": {"options": None},
                },
            },
        },
    }),
    ("1.2.1", {
        "name": "1.3.0rcN",
        "pattern": "1\\.3\\.0rc1?[0-9](\\.post[0-9]+)?",
        "floor": "1.3.0rc0",
        "example": "1.3.0rc13",
        "data": "tests/data/trtllm-cli/1.3.0rcN.json",
        "programs": {
            "trtllm-bench": {
                "options": {"--telemetry": {"type": "flag"}, "--no-telemetry": {"type": "flag"}},
                "commands": {
                    "throughput": {"options": {"--config": {"type": "str", "alias_of": "--extra_llm_api_options"}}},
                    "latency": {"options": {"--config": {"type": "str", "alias_of": "--extra_llm_api_options"}}},
                },
            },
        },
    }),
)
SURFACES = _rebuilt(FIRST, CHANGES)
