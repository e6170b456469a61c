"""Turn the published benchmark-spark results (``all_benchmark_results.json``) into run records.

The same loader, statistics and report then run on the study and on new campaigns, and a new campaign can
be compared with it (``sparkfleet compare``). What the study file does not say is left empty rather than
guessed: latency (null in the study), the KV fraction (not recorded), model_loaded (the study's scripts ignored
the model argument, so nobody knows which checkpoint ran).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import read_json

CAMPAIGN = "benchmark-spark"
HOST = "spark-study"
WORKLOAD = "study"
#: From data/benchmark-spark/README.md: "device total 119.64 GiB".
DEVICE_TOTAL_GIB = 119.64
STUDY_VERSIONS = {
    "tensorrt_llm": "1.1.0rc3",
    "driver": "580.95.05",
    "image": "nvcr.io/nvidia/tensorrt-llm/release:spark-single-gpu-dev",
    "gpu": "GB10",
}
_STUDY_TIMESTAMP = "%Y%m%d_%H%M%S"
#: Study field -> contract metric.
_METRIC_MAP = {
    "output_throughput": "output_tok_s",
    "throughput": "req_s",
    "peak_memory": "peak_memory_gib",
    "kv_cache": "kv_cache_gib",
}


def read_study(path: Path) -> list[dict[str, Any]]:
    """The study's runs as a flat list, each carrying its model and environment."""
    try:
        data = read_json(path, "benchmark-spark results file")  # unreadable: one line naming it (exit 2)
        runs = [run for envs in data["models"].values() for env_runs in envs.values() for run in env_runs]
    except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
        raise UsageError(f"{path}: not a benchmark-spark results file ({exc})") from exc
    for run in runs:
        missing = {"environment", "model_name", "iteration", "timestamp", "exit_code"} - set(run)
        if missing:
            raise UsageError(f"{path}: a run lacks {', '.join(sorted(missing))}")
    return runs


def study_records(
    path: Path, campaign: str = CAMPAIGN, host: str = HOST, workload: str = WORKLOAD
) -> list[dict[str, Any]]:
    """Run records for every study run, ``order_index`` following the timestamps.

    The study repeated "iteration 1" of gpt120b native four times (restarts); run identity needs one
    iteration per run, so iterations are renumbered 1..n per cell in time order and the study's own
    number is kept as ``extra.study_iteration``.
    """
    runs = sorted(read_study(path), key=lambda r: (_parse_timestamp(r["timestamp"]), r["model_name"]))
    attempt: dict[tuple[str, str], int] = {}
    records = []
    for order_index, run in enumerate(runs):
        cell = (run["model_name"], run["environment"])
        attempt[cell] = attempt.get(cell, 0) + 1
        records.append(_record(run, path.name, campaign, host, workload, attempt[cell], order_index))
    return records


def _parse_timestamp(text: str) -> datetime:
    try:
        return datetime.strptime(text, _STUDY_TIMESTAMP)
    except ValueError as exc:
        raise UsageError(f"study timestamp {text!r} is not {_STUDY_TIMESTAMP}") from exc


def _record(
    run: dict[str, Any], source: str, campaign: str, host: str, workload: str, iteration: int, order_index: int
) -> dict[str, Any]:
    environment = str(run["environment"])
    model = str(run["model_name"])
    metrics: dict[str, float] = {
        target: float(run[field]) for field, target in _METRIC_MAP.items() if run.get(field) is not None
    }
    if run.get("latency") is not None:
        metrics["latency_ms_avg"] = float(run["latency"])
    metrics["device_total_gib"] = DEVICE_TOTAL_GIB
    sources = {
        name: f"{source}: {field} (TensorRT-LLM 'Peak memory during memory usage profiling' log line)"
        for field, name in _METRIC_MAP.items()
        if name in ("peak_memory_gib", "kv_cache_gib") and name in metrics
    }
    sources |= {name: f"{source}: {field}" for field, name in _METRIC_MAP.items() if name not in sources}
    sources["device_total_gib"] = "benchmark-spark README: device total 119.64 GiB"
    exit_code = int(run["exit_code"])
    return contract.new_record(
        campaign, host, model, environment, workload, iteration,
        model_id=run.get("model_id"),
        # Unknown: the study's runner ignored the model argument (README, "Known flaws").
        model_loaded=None,
        environment_kind="native" if environment == "native" else "container",
        workload_params={"engine": "trtllm-bench", "backend": "pytorch", "model_path": run.get("model_path")},
        engine="trtllm-bench",
        engine_version=STUDY_VERSIONS["tensorrt_llm"],
        order_index=order_index,
        # The study's clock is local with an unknown zone: ISO without an offset, and said so (extra).
        started_utc=_parse_timestamp(run["timestamp"]).isoformat(),
        exit_code=exit_code,
        status="ok" if exit_code == 0 else "failed",
        reason=None if exit_code == 0 else f"exit code {exit_code}",
        metrics=metrics,
        metric_sources=sources,
        telemetry={
            "gpu_temp_start_c": run.get("start_temp_celsius"),
            "gpu_temp_end_c": run.get("end_temp_celsius"),
        },
        versions=dict(STUDY_VERSIONS),
        extra={
            "study_iteration": int(run["iteration"]),
            "started_tz": "local, zone unknown (study timestamp)",
            "source": {"file": source, "study": "brandonrc/benchmark-spark analysis/all_benchmark_results.json"},
        },
    ).to_dict()


def import_study(
    path: str | os.PathLike[str], out: str | os.PathLike[str], campaign: str = CAMPAIGN, host: str = HOST
) -> Path:
    """Write the study as a results tree ``OUT/<campaign>/<host>/runs/<run_id>/record.json``.

    Returns the campaign directory (what ``sparkfleet report`` takes).
    """
    path = Path(path)
    records = study_records(path, campaign=campaign, host=host)
    campaign_dir = Path(out) / contract.slug(campaign, 80)
    host_dir = campaign_dir / contract.slug(host, 80)
    for rec in records:
        problems = contract.validate(rec)
        if problems:  # our own bug if it happens; never write a record the loader would reject
            raise AssertionError(f"study record {rec['run_id']} breaks the contract: {problems}")
        contract.write_json_atomic(host_dir / "runs" / rec["run_id"] / contract.RECORD_NAME, rec)
    contract.write_json_atomic(
        host_dir / "host.json",
        {"host": host, "imported_from": str(path.name), "device_total_gib": DEVICE_TOTAL_GIB, **STUDY_VERSIONS},
    )
    contract.write_json_atomic(
        campaign_dir / "campaign.json",
        {"campaign": campaign, "imported_from": str(path.name), "runs": len(records), "hosts": [host]},
    )
    return campaign_dir
