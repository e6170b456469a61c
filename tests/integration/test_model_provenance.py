"""Provenance end to end (issue 23): bench.yml on the fake fleet, a model given by its directory under the
models directory. The engine stand-in reads the checkpoint it is given the way TensorRT-LLM does and prints
what it loaded; with SPARKFLEET_FAKE_LOADED_MODEL_DIR it loads another directory (the study's bug: the model
argument ignored) while its `Model:` line still echoes ours. Native (chroot) and container runs see the
models directory at the same path."""

from __future__ import annotations

import pytest
import yaml
from modeldirs import make_model
from test_matrix import FAST_COOLDOWN, _bench, _records

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]


def test_a_run_that_loaded_another_model_directory_is_invalid_naming_the_field(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    models = tmp_path / "models"
    want = make_model(models, "llama-8b", layers=8)
    other = make_model(models, "qwen-7b", layers=1, hidden=3584, vocab=152064)
    fast = {"SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}
    campaign = {
        "name": "provenance", "image": test_image, "iterations": 1, "order": "interleaved",
        "cooldown": FAST_COOLDOWN, "timeout_s": 120,
        "models": [{"name": "llama", "hf_id": "meta-llama/Llama-3.1-8B", "path": want["path"]}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [
            {"name": "right", "preset": "T1", "requests": 2, "env": fast},
            {"name": "swapped", "preset": "T1", "requests": 2,
             "env": {**fast, "SPARKFLEET_FAKE_LOADED_MODEL_DIR": other["path"]}},
        ],
    }
    path = tmp_path / "campaign-provenance.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    results = tmp_path / "results"
    proc = _bench(repo, ansible_env, fleet.inventory, path, results, "-e", f"sparkfleet_models_dir={models}")
    assert proc.returncode == 0, proc.stdout[-6000:]
    by = {(r["workload"], r["environment"]): r for r in _records(results / "provenance")}
    assert len(by) == 4, sorted(by)
    for env in ("native", "container"):
        right, swapped = by[("right", env)], by[("swapped", env)]
        assert validate(right) == [] and validate(swapped) == []
        assert right["status"] == "ok" and right["reason"] is None, right["reason"]
        assert right["provenance"]["status"] == "confirmed"
        assert right["provenance"]["expected"]["param_count"] == want["params"]
        # the log's Model: line echoes our argument in both: not evidence either way
        assert swapped["model_loaded"] == right["model_loaded"] == "meta-llama/Llama-3.1-8B"
        assert swapped["status"] == "invalid" and swapped["provenance"]["status"] == "mismatch"
        assert swapped["reason"].startswith(f"provenance: model_path: the engine loaded {other['path']}, the "
                                            f"model directory has {want['path']}")
        assert "checkpoint_bytes: the engine loaded" in swapped["reason"]
