"""The run-record contract (docs/RECORD.md): one typed record, one builder, validation, format versions.

A run record is one JSON object per run (``record.json``). Its definition is this file, and only this file:

* :class:`RunRecord` is the record as a type: each field with its JSON type(s), whether a reader may rely on
  it being present, and what it means. The JSON Schema (``docs/record.schema.json``) is *generated* from it
  (:func:`json_schema`; run this file as a module of ``ansible_collections.sparkfleet.bench``) and a test checks
  the two agree, so there is nothing to keep in step by hand.
* :func:`new_record` is the one builder: identity in, ``run_id`` computed, every other field defaulted.
* :func:`validate` says what is wrong with a record (empty list: it honours the contract); :func:`sealed` is
  what a producer writes: the record as built when it is valid, else the same run as ``failed`` with a
  reason that names the violation, so that a bad record is a failed run on the host, never a file the
  report later skips.
* :data:`SCHEMA_VERSION` is the format version; :func:`upgrade` brings a record of an older version to the
  current one, one migration function per version step (``MIGRATIONS``), in the manner of pyperf's and
  asv's result files. A record newer than this code is refused, naming both versions.

The file ships to hosts inside Ansible modules (AnsiballZ bundles Python files only, not data files), so
it is standard library only and runs on Python 3.8.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import operator
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .textfile import write_atomic

#: A run record's file name, in its run directory (``<host>/runs/<run_id>/record.json``).
RECORD_NAME = "record.json"

#: Run statuses: the final state of a run (record.json ``status``, the ledger's ``finished`` events).
STATUSES = ("ok", "failed", "timeout", "invalid")
#: Statuses a retry (``sparkfleet_retry_failed``) runs again.
RETRY_STATUSES = ("failed", "timeout")

#: The record format version this code writes. Older versions are read through ``MIGRATIONS``.
SCHEMA_VERSION = 2

#: Metric name -> unit. Fixed names; every record's ``metrics`` object uses only these keys.
METRICS: Dict[str, str] = {
    "output_tok_s": "tokens/s",
    "total_tok_s": "tokens/s",
    "req_s": "requests/s",
    "latency_ms_avg": "ms",
    "latency_ms_p50": "ms",
    "latency_ms_p90": "ms",
    "latency_ms_p95": "ms",
    "latency_ms_p99": "ms",
    "ttft_ms": "ms",
    "tpot_ms": "ms",
    "peak_memory_gib": "GiB",
    "kv_cache_gib": "GiB",
    "device_total_gib": "GiB",
    "kv_fraction": "fraction",
    # TensorRT-LLM's KV budget line (optional: older records and engines whose log does not print it lack them)
    "tmp_kv_gib": "GiB",  # temporary KV cache during memory profiling, the budget formula's tmp_kv term
    "kv_budget_residual_gib": "GiB",  # available KV - fraction x (device_total - peak + tmp_kv), as logged
    # matmul sanity workload
    "gflops": "GFLOP/s",
    "matmul_s_mean": "s",
}

_GIB_MAX = 4096.0  # 4 TiB: beyond any single device's memory (a GB10 has 128 GB)
_LATENCY_MS_MAX = 7 * 86400 * 1000.0  # a week: no run may last longer (campaign timeout_s)
#: Metric name -> (low, high): the physical range of its value, both ends included. A value outside it (a
#: negative throughput, 1.7e308 tok/s, NaN) is a parse or unit error, never a measurement: the producer and the
#: loader reject that metric (the run is kept, the reason named: :func:`screen_metrics`).
METRIC_RANGES: Dict[str, Tuple[float, float]] = {
    "output_tok_s": (0.0, 1e7),
    "total_tok_s": (0.0, 1e7),
    "req_s": (0.0, 1e6),
    "latency_ms_avg": (0.0, _LATENCY_MS_MAX),
    "latency_ms_p50": (0.0, _LATENCY_MS_MAX),
    "latency_ms_p90": (0.0, _LATENCY_MS_MAX),
    "latency_ms_p95": (0.0, _LATENCY_MS_MAX),
    "latency_ms_p99": (0.0, _LATENCY_MS_MAX),
    "ttft_ms": (0.0, _LATENCY_MS_MAX),
    "tpot_ms": (0.0, _LATENCY_MS_MAX),
    "peak_memory_gib": (0.0, _GIB_MAX),
    "kv_cache_gib": (0.0, _GIB_MAX),
    "device_total_gib": (0.0, _GIB_MAX),
    "kv_fraction": (0.0, 1.0),
    "tmp_kv_gib": (0.0, _GIB_MAX),
    "kv_budget_residual_gib": (-_GIB_MAX, _GIB_MAX),  # a difference: either sign
    "gflops": (0.0, 1e9),  # 1 EFLOP/s
    "matmul_s_mean": (0.0, 7 * 86400.0),
}
#: How a rejected metric is named in ``parse_warnings`` (the loader finds the rejections by it).
REJECTED_METRIC = "rejected metric "


def metric_problem(name: str, value: Any) -> Optional[str]:
    """Why ``value`` cannot be metric ``name``: not a number, not finite, or outside METRIC_RANGES; None when
    it can (or is None, or the name is not a metric: :func:`validate` reports unknown names)."""
    if value is None or name not in METRIC_RANGES:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "%r is not a number" % (value,)
    if not math.isfinite(value):
        return "%r is not a finite number" % (value,)
    low, high = METRIC_RANGES[name]
    if not low <= value <= high:
        return "%r is outside its physical range %g to %g %s" % (value, low, high, METRICS[name])
    return None


def screen_metrics(metrics: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """``(the metrics without any that metric_problem refuses, one line per refused metric)``; each line
    starts with REJECTED_METRIC, e.g. ``rejected metric 'output_tok_s': -5 is outside its physical range...``."""
    kept: Dict[str, Any] = {}
    notes: List[str] = []
    for name, value in metrics.items():
        problem = metric_problem(name, value)
        if problem is None:
            kept[name] = value
        else:
            notes.append("%s%r: %s" % (REJECTED_METRIC, name, problem))
    return kept, notes


def screened(record: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """The record with its refused metrics removed and named in ``parse_warnings`` (the run stays as it was:
    counted, its other figures kept); the notes. A record whose metrics or parse_warnings are not of their
    type is returned as it is (:func:`validate` names that)."""
    metrics, warnings = record.get("metrics"), record.get("parse_warnings")
    if not isinstance(metrics, dict) or not isinstance(warnings, (list, type(None))):
        return record, []
    kept, notes = screen_metrics(metrics)
    if not notes:
        return record, []
    return {**record, "metrics": kept, "parse_warnings": list(warnings or []) + notes}, notes


def rejected_metrics(record: Dict[str, Any]) -> List[str]:
    """The metric rejections a record names in its ``parse_warnings`` (by the producer or the loader)."""
    warnings = record.get("parse_warnings")
    if not isinstance(warnings, list):
        return []
    return [w for w in warnings if isinstance(w, str) and w.startswith(REJECTED_METRIC)]


#: Raw per-iteration samples (``samples``: name -> list, one value per measured iteration, in order) -> unit.
SAMPLES: Dict[str, str] = {
    "matmul_s": "s",  # matmul: seconds of each timed product
    "latency_ms": "ms",  # hf-generate: wall time of each generate() call
    "ttft_ms": "ms",  # hf-generate: time to the first token of each call
    "output_tokens": "tokens",  # hf-generate: tokens each call generated
}

#: Figures of the engine's KV budget, not results: kept for the report's memory decomposition (its KV residual),
#: never compared between runs, environments or hosts.
KV_BUDGET_METRICS = ("tmp_kv_gib", "kv_budget_residual_gib")

#: The engine's configuration as its output states it, not results: never judged (CV gate, verdicts, deviations).
CONFIG_METRICS = ("device_total_gib", "kv_fraction")
#: Memory metrics must say where their figure came from (log line, report json, telemetry, ...).
MEMORY_METRICS = ("peak_memory_gib", "kv_cache_gib", *CONFIG_METRICS, *KV_BUDGET_METRICS)


class ServingMetric(NamedTuple):
    """A serving point's metric: its unit, its scope (AGGREGATE, PER_USER or LATENCY: a table or a figure shows
    one scope only), its direction (+1: higher is better, -1: lower is better), its name in words, and for a
    per-user rate the aggregate rate of the same requests, and whether by the client's definitions the per-user
    rate cannot exceed concurrency x that aggregate (the report screens the figures that do)."""

    unit: str
    scope: str
    direction: int
    words: str
    aggregate: Optional[str] = None
    bounded_by_aggregate: bool = True


#: The scopes of the serving point metrics: all concurrent requests together, one request, a time.
AGGREGATE, PER_USER, LATENCY = "aggregate", "per user", "latency"
#: The metrics of a serving point (``serving.points[].metrics``: its client's figures per point, named by
#: serving_client's drivers; docs/serving-contract.md, "Record"), in the report's order. Not screened by
#: METRIC_RANGES. Not one of them is a run's metric (METRICS) of the same name.
SERVING_METRICS: Dict[str, ServingMetric] = {
    "pp_tok_s": ServingMetric("tokens/s", AGGREGATE, 1, "prompt throughput (aggregate)"),
    "tg_tok_s": ServingMetric("tokens/s", AGGREGATE, 1, "generation throughput (aggregate)"),
    "peak_tg_tok_s": ServingMetric("tokens/s", AGGREGATE, 1, "peak generation throughput (aggregate)"),
    "pp_req_tok_s": ServingMetric("tokens/s", PER_USER, 1, "prompt throughput (per user)", aggregate="pp_tok_s"),
    "tg_req_tok_s": ServingMetric("tokens/s", PER_USER, 1, "generation throughput (per user)",
                                  aggregate="tg_tok_s"),
    "ttfr_ms": ServingMetric("ms", LATENCY, -1, "time to first response"),
    "e2e_ttft_ms": ServingMetric("ms", LATENCY, -1, "end-to-end time to first token"),
    "est_ppt_ms": ServingMetric("ms", LATENCY, -1, "estimated prompt processing time"),
    # AIPerf's (serving_client.AIPERF_METRICS; its time_to_first_token is e2e_ttft_ms above)
    "out_tok_s": ServingMetric("tokens/s", AGGREGATE, 1, "output throughput over the run (aggregate)"),
    # not bounded: AIPerf's per-user rate is 1 / inter-token latency (the decode alone), its aggregate the output
    # tokens over the whole benchmark (prefill and the gaps between requests too): at concurrency 1 the per-user
    # figure is routinely above the aggregate (1,168-1,481 against 644-838 tok/s, tests/integration/test_aiperf_sla.py)
    "out_req_tok_s": ServingMetric("tokens/s", PER_USER, 1, "output throughput (per user: 1 / inter-token "
                                   "latency)", aggregate="out_tok_s", bounded_by_aggregate=False),
    "req_per_s": ServingMetric("requests/s", AGGREGATE, 1, "request throughput"),
    "goodput_per_s": ServingMetric("requests/s", AGGREGATE, 1, "goodput (requests/s within the --goodput targets)"),
    "itl_ms": ServingMetric("ms", LATENCY, -1, "inter-token latency (TPOT)"),
    "out_tok_per_j": ServingMetric("tokens/J", AGGREGATE, 1, "output tokens per joule (the client's GPU "
                                   "telemetry)"),
}

#: Where a run runs (its environment's kind): native, chroot into the image's rootfs; container, docker run;
#: bare, straight on the host (no isolation).
ENVIRONMENT_KINDS = ("native", "container", "bare")

#: ``provenance.status``: the engine's output showed the requested model (an identifying field matched and
#: none differed), showed nothing that identifies it, showed another one, or the workload loads no model.
PROVENANCE_STATUSES = ("confirmed", "unconfirmed", "mismatch", "not_applicable")

IDENTITY_FIELDS = ("campaign", "host", "model", "environment", "workload", "iteration")

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, limit: int = 40) -> str:
    """A path-safe, human-readable fragment: never empty, never '.' or '..'."""
    if type(text) is str:  # the common case, and repeated: a fleet has a handful of models and workloads
        return _slug_str(text, limit)
    return _slug(text, limit)


def _slug(text: Any, limit: int) -> str:
    out = _SAFE.sub("-", str(text)).strip("-.")[:limit]
    return out or "x"


_slug_str = functools.lru_cache(maxsize=4096)(_slug)


def run_id(campaign: str, host: str, model: str, environment: str, workload: str, iteration: int) -> str:
    """Stable identity of one run. Same inputs -> same id, so a re-run finds what is already done.

    Readable prefix for humans, hash suffix for uniqueness (slugs of different names may collide).
    """
    key = "\x1f".join(map(str, (campaign, host, model, environment, workload, int(iteration))))
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{slug(model, 24)}.{slug(environment, 16)}.{slug(workload, 16)}.i{int(iteration):03d}.{digest}"


# ---------------------------------------------------------------------------------------- the type


def _field(types: Tuple[str, ...], doc: str, required: bool = False, default: Any = None, factory: Any = None,
           enum: Tuple[Any, ...] = (), python_required: bool = False) -> Any:
    """One field of the contract: its JSON types, whether a reader may rely on it, what it means."""
    meta = {"types": types, "doc": doc, "required": required, "enum": enum}
    if python_required:
        return field(metadata=meta)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


_S, _I, _N, _B, _O, _A, _NULL = "string", "integer", "number", "boolean", "object", "array", "null"


@dataclass
class RunRecord:
    """One run of a campaign, as ``record.json`` holds it. Build it with :func:`new_record`.

    Assigning a name that is not a field raises (a typo must not become a field the contract lacks).
    """

    # identity: run_id is derived from the other six (run_id())
    run_id: str = _field((_S,), "stable identity of the run, derived from the six identity fields",
                         required=True, python_required=True)
    campaign: str = _field((_S,), "campaign name", required=True, python_required=True)
    host: str = _field((_S,), "host name (inventory_hostname)", required=True, python_required=True)
    model: str = _field((_S,), "model name requested by the campaign", required=True, python_required=True)
    environment: str = _field((_S,), "environment name (native, container, or a named variant)",
                              required=True, python_required=True)
    workload: str = _field((_S,), "workload name (study, T1..T6, matmul, ...)", required=True,
                           python_required=True)
    iteration: int = _field((_I,), "iteration number; warm-up runs count down from 0", required=True,
                            python_required=True)
    schema_version: int = _field((_I,), "record format version (see MIGRATIONS)", required=True,
                                 default=SCHEMA_VERSION)
    # scalars (the loader's columns, in this order)
    model_id: Optional[str] = _field((_S, _NULL), "Hugging Face id or path requested")
    model_loaded: Optional[str] = _field((_S, _NULL), "model the engine's output says it loaded")
    environment_kind: Optional[str] = _field((_S, _NULL), "native, container or bare", enum=ENVIRONMENT_KINDS)
    engine: Optional[str] = _field((_S, _NULL), "engine of the workload (trtllm, matmul, hf-generate, ...)")
    engine_version: Optional[str] = _field((_S, _NULL), "engine version: as its output reports it, or for a serving "
                                           "run as its own version command gives it (serving.engine_version)")
    warmup: Optional[bool] = _field((_B, _NULL), "a warm-up run (not measured)")
    order_index: Optional[int] = _field((_I, _NULL), "position of this run in the host's plan")
    started_utc: Optional[str] = _field((_S, _NULL), "ISO 8601 start time")
    ended_utc: Optional[str] = _field((_S, _NULL), "ISO 8601 end time")
    duration_s: Optional[float] = _field((_N, _NULL), "wall time of the run's commands, seconds")
    exit_code: Optional[int] = _field((_I, _NULL), "exit status of the measured command")
    status: str = _field((_S,), "ok, failed, timeout or invalid", required=True, default="failed", enum=STATUSES)
    reason: Optional[str] = _field((_S, _NULL), "why the run is not ok (required unless status is ok)")
    # figures
    metrics: Dict[str, Any] = _field((_O,), "metric name (METRICS) -> number or null", required=True,
                                     factory=dict)
    metric_sources: Dict[str, str] = _field((_O,), "metric name -> where the figure came from", required=True,
                                            factory=dict)
    samples: Dict[str, List[float]] = _field(
        (_O,), "raw per-iteration samples: name (SAMPLES) -> one number per measured iteration, in order",
        required=True, factory=dict)
    # nested context
    workload_params: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "engine, mode, batch, input_len, output_len, requests, concurrency, backend, ...")
    cooldown: Optional[Dict[str, Any]] = _field((_O, _NULL), "waited_s, start_temp_c, end_temp_c, threshold_c, reason")
    telemetry: Optional[Dict[str, Any]] = _field((_O, _NULL), "summary of telemetry.csv")
    versions: Optional[Dict[str, Any]] = _field((_O, _NULL), "software versions (image and image_ref, absent from a "
                                                "bare run's record; engine, engine_version, campaign config hash)")
    command: Optional[List[str]] = _field((_A, _NULL), "argv of the measured command as launched, secrets redacted")
    parse_warnings: Optional[List[str]] = _field((_A, _NULL), "what looked wrong in the engine's output")
    parse_missing: Optional[List[str]] = _field((_A, _NULL), "expected figures the engine's output lacked")
    probe: Optional[Dict[str, Any]] = _field((_O, _NULL), "where the workload ran (its probe lines)")
    memory: Optional[Dict[str, Any]] = _field((_O, _NULL), "memory state of the host at the run's start and peak")
    fingerprint: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "environment fingerprint of the running benchmark process: NVIDIA/CUDA libraries mapped "
        "(name, version, path, source), LD_LIBRARY_PATH, Python/torch/tensorrt_llm versions (sparkfleet_host."
        "fingerprint); optional in format version 2 (absent or null in records written before it)")
    provenance: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "whether the engine loaded the requested model: status (PROVENANCE_STATUSES), reason, "
        "expected (the model's card: a model directory's, or a served GGUF's), loaded (what the engine's output "
        "shows), checks (per field)")
    serving: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "a serving run (engine server + load generator): engine, engine_version (its version command's "
        "answer), server (argv, port, ready_s, log, stop, model_meta), client (name, version), kv (the engine's own "
        "KV sizing from its log), points (one per depth x concurrency x pp x tg: its metrics, raw samples and the "
        "client's raw output file); optional in format version 2")
    readiness: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "the readiness probe before the run: SM clock, power, utilisation, clock-event reasons and "
        "counters under a short fixed GPU load and the TFLOP/s it delivered, the verdict (healthy, suspect, "
        "invalid, unknown) with its reasons and notes and the action taken; optional in format version 2")
    attestation: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "host state over the run: throttle/event counters as deltas, clock/power controls as "
        "applied by sparkfleet, memory state at start (MemFree, MemAvailable, Cached, free huge blocks), "
        "energy over the run's own window; optional in format version 2")
    extra: Optional[Dict[str, Any]] = _field(
        (_O, _NULL), "producer-specific data outside the contract, kept verbatim (a v1 record's unknown fields)")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in FIELD_NAMES:
            raise AttributeError(f"'{name}' is not a field of the run record (see sparkfleet_host.contract.record)")
        object.__setattr__(self, name, value)

    def to_dict(self) -> Dict[str, Any]:
        """The record as its JSON object: every field, unset ones null (a shallow copy)."""
        return {name: getattr(self, name) for name in FIELD_NAMES}


#: The keys of each nested section that a reader may rely on, with their JSON type. Null is always allowed (a
#: producer that could not measure a value leaves it null) and a producer may add keys; a known key of
#: another type breaks the contract as a top-level field of the wrong type does.
SECTION_KEYS: Dict[str, Dict[str, str]] = {
    "cooldown": {"reason": _S, "waited_s": _N, "start_temp_c": _N, "end_temp_c": _N, "threshold_c": _N,
                 "timed_out": _B, "polls": _I},
    "telemetry": {"sensor": _S, "csv_path": _S, "samples": _I, "rows": _I, "duration_s": _N, "interval_s": _N,
                  "missed": _I, "jitter_ms": _O, "gpus": _A, "gpu_temp_c_max": _N, "gpu_temp_c_mean": _N,
                  "gpu_power_w_mean": _N, "gpu_power_w_max": _N, "sm_clock_mhz_mean": _N, "gpu_util_pct_mean": _N,
                  "throttle_reasons_seen": _A, "mem_used_gib_max": _N, "cgroup_mem_gib_max": _N,
                  "processes_spawned": _I, "cpu_ms_per_sample": _N, "errors": _A,
                  "sensor_note": _S, "nvml_bindings": _S},
    "versions": {"campaign_config_hash": _S, "image": _S, "image_ref": _S, "engine": _S, "engine_version": _S,
                 "trtllm": _O},
    "probe": {"env_probe": _S, "hostname": _S, "dockerenv": _S, "pid": _S, "root_dev_ino": _S},
    "memory": {"version": _I, "samples": _I, "start": _O, "peak": _O, "cgroup": _O,
               "drop_caches": _O, "environment": _O, "errors": _A, "container_memory_flags": _A,
               "max_cached_gib": _N, "min_cuda_free_gib": _N, "min_mem_available_gib": _N},
    "fingerprint": {"chroot": _B, "comm": _S, "depth": _I, "env": _O, "env_names": _A, "environment_kind": _S,
                    "exe": _S, "libraries": _A, "packages": _O, "pid": _I, "python": _S, "samples": _I},
    "provenance": {"status": _S, "reason": _S, "expected": _O, "loaded": _O, "checks": _O},
    "serving": {"engine": _S, "engine_version": _O, "server": _O, "client": _O, "kv": _O, "points": _A,
                "point_order_seed": _I, "cluster": _O, "sla": _O},
    "readiness": {"state": _S, "reasons": _A, "action": _O, "sm_clock_mhz": _N, "power_w": _N,
                  "expected_clock_mhz": _N, "expected_source": _S, "duration_s": _N, "policy": _S,
                  "error": _S, "reapplied": _O, "before_reapply": _O, "notes": _A, "gpu_name": _S,
                  "gpu_class": _S, "max_clock_mhz": _N, "clock_floor_mhz": _N, "utilization_pct": _N,
                  "active_reasons": _A, "reason_share": _O, "counter_deltas_us": _O, "window_s": _N,
                  "fault_counter_us": _N, "power_mean_w": _N, "power_limit_w": _N, "power_limit_source": _S,
                  "power_limited": _B, "tflops": _N, "tflops_reference": _N, "tflops_floor": _N},
    "attestation": {"counters": _O, "controls_applied": _O, "memory_start": _O, "energy": _O, "errors": _A},
}


_FIELDS = dataclasses.fields(RunRecord)
#: Every field, in definition order.
FIELD_NAMES = tuple(f.name for f in _FIELDS)
#: Fields a reader may rely on being present.
REQUIRED_FIELDS = tuple(f.name for f in _FIELDS if f.metadata["required"])
#: Scalar fields outside the identity (the loader's fixed columns).
SCALAR_FIELDS = tuple(f.name for f in _FIELDS if f.name not in (*IDENTITY_FIELDS, "run_id", "schema_version")
                      and not {_O, _A} & set(f.metadata["types"]))
_TYPES = tuple((f.name, f.metadata["types"]) for f in _FIELDS)
_ENUMS = tuple((f.name, f.metadata["enum"]) for f in _FIELDS if f.metadata["enum"])


def new_record(campaign: str, host: str, model: str, environment: str, workload: str, iteration: int,
               **fields: Any) -> RunRecord:
    """The one builder: a record of this run at the current format version, ``run_id`` from the identity,
    every field not given at its default (status ``failed`` until the producer says otherwise)."""
    return RunRecord(run_id=run_id(campaign, host, model, environment, workload, iteration), campaign=campaign,
                     host=host, model=model, environment=environment, workload=workload, iteration=iteration,
                     **fields)


# ---------------------------------------------------------------------------------- JSON Schema


def json_schema() -> Dict[str, Any]:
    """The contract as a JSON Schema (draft 2020-12), generated from :class:`RunRecord`."""
    properties: Dict[str, Any] = {}
    for f in _FIELDS:
        types = f.metadata["types"]
        spec: Dict[str, Any] = {"type": types[0] if len(types) == 1 else list(types),
                                "description": f.metadata["doc"]}
        if f.metadata["enum"]:
            spec["enum"] = list(f.metadata["enum"]) + ([None] if _NULL in types else [])
        properties[f.name] = spec
    properties["schema_version"]["const"] = SCHEMA_VERSION
    properties["metrics"].update({
        "propertyNames": {"enum": list(METRICS)},
        "additionalProperties": {"type": ["number", "null"]},
        # the physical range of each (METRIC_RANGES): a value outside it is rejected, the run kept
        "properties": {name: {"type": ["number", "null"], "minimum": METRIC_RANGES[name][0],
                              "maximum": METRIC_RANGES[name][1]} for name in METRICS if name in METRIC_RANGES},
        "x-units": dict(METRICS),
    })
    properties["metric_sources"]["additionalProperties"] = {"type": "string"}
    for section, keys in SECTION_KEYS.items():
        properties[section]["properties"] = {key: {"type": [kind, _NULL]} for key, kind in keys.items()}
    properties["samples"].update({
        "propertyNames": {"enum": list(SAMPLES)},
        "additionalProperties": {"type": "array", "items": {"type": "number"}},
        "x-units": dict(SAMPLES),
    })
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "Generated from sparkfleet_host/contract/record.py (RunRecord); do not edit by hand.",
        "title": f"sparkfleet run record, format version {SCHEMA_VERSION}",
        "type": "object",
        "required": list(REQUIRED_FIELDS),
        "properties": properties,
        "additionalProperties": False,
    }


# ----------------------------------------------------------------------------- format versions


class RecordError(ValueError):
    """A record no reader may use: one that breaks the contract, or is of a version this code cannot read."""


class RecordVersionError(RecordError):
    """A record of a format version this code cannot read (newer than it, or never defined)."""


def _v1_to_v2(record: Dict[str, Any]) -> Dict[str, Any]:
    """v1 -> v2: per-iteration ``samples`` appear (none were kept in v1: ``{}``); fields outside the
    contract, which v1 tolerated (parse_warnings, parse_missing, probe were written but not defined;
    producers added their own), become defined fields or move under ``extra``."""
    v2_fields = _V2_FIELD_NAMES
    out = {key: value for key, value in record.items() if key in v2_fields}
    unknown = {key: value for key, value in record.items() if key not in v2_fields}
    if unknown:
        out["extra"] = unknown
    out.setdefault("samples", {})
    out["schema_version"] = 2
    return out


#: The fields of format version 2, frozen here: a later version's migration must not change what this
#: step does.
_V2_FIELD_NAMES = frozenset((
    "run_id", "campaign", "host", "model", "environment", "workload", "iteration", "schema_version",
    "model_id", "model_loaded", "environment_kind", "engine", "engine_version", "warmup", "order_index",
    "started_utc", "ended_utc", "duration_s", "exit_code", "status", "reason", "metrics", "metric_sources",
    "samples", "workload_params", "cooldown", "telemetry", "versions", "command", "parse_warnings",
    "parse_missing", "probe", "memory", "extra",
))

#: version N -> the function that turns a version-N record into a version N+1 record.
MIGRATIONS = {1: _v1_to_v2}


def upgrade(record: Any) -> Any:
    """The record at the current format version (a new object when it was older; the same one when it is
    current). Anything that is not a JSON object, or has no integer version, is returned as it is, for
    :func:`validate` to word. Raises :class:`RecordVersionError` for a version newer than this code or
    one that was never defined."""
    if not isinstance(record, dict):
        return record
    version = record.get("schema_version")
    if type(version) is not int or version == SCHEMA_VERSION:
        return record
    if version > SCHEMA_VERSION:
        raise RecordVersionError(f"schema_version {version} is newer than this sparkfleet reads "
                                 f"({SCHEMA_VERSION}): upgrade sparkfleet to read it")
    if version not in MIGRATIONS:
        raise RecordVersionError(f"schema_version {version} is not a record format version "
                                 f"(known: {', '.join(map(str, sorted({*MIGRATIONS, SCHEMA_VERSION})))})")
    while version < SCHEMA_VERSION:
        record = MIGRATIONS[version](record)
        version += 1
    return record


# ----------------------------------------------------------------------------------- validation


@functools.lru_cache(maxsize=256)
def _type_problems(keys: Tuple[str, ...], value_types: Tuple[type, ...]) -> Tuple[str, ...]:
    """Type problems of a record with these keys and these Python types of its values, in field order.

    Whether a value has its field's JSON type depends on the value's Python type alone, and the records
    of one producer share keys and types: so this runs once per record shape, not once per record.
    """
    present = dict(zip(keys, value_types))
    return tuple(
        f"field '{key}' has type {present[key].__name__}, expected {types[0] if len(types) == 1 else list(types)}"
        for key, types in _TYPES
        if key in present and not _type_ok(present[key], types)
    )


@functools.lru_cache(maxsize=256)
def _section_problems(section: str, keys: Tuple[str, ...], value_types: Tuple[type, ...]) -> Tuple[str, ...]:
    """Type problems of one nested section's known keys (cached per shape, as :func:`_type_problems`)."""
    known = SECTION_KEYS[section]
    return tuple(
        f"field '{section}.{key}' has type {kind.__name__}, expected {known[key]}"
        for key, kind in zip(keys, value_types)
        if key in known and not _type_ok(kind, (known[key], _NULL))
    )


_REQUIRED_SET = frozenset(REQUIRED_FIELDS)
_FIELD_SET = frozenset(FIELD_NAMES)
_IDENTITY_AND_RUN_ID = frozenset((*IDENTITY_FIELDS, "run_id"))
_identity = operator.itemgetter(*IDENTITY_FIELDS)
_METRIC_NAMES = frozenset(METRICS)
_SAMPLE_NAMES = frozenset(SAMPLES)
#: Metric value types accepted without a closer look (bool, an int subclass, is accepted by the slow path).
_PLAIN_METRIC_TYPES = frozenset((int, float, type(None)))
_LOW = {name: METRIC_RANGES.get(name, (-math.inf, math.inf))[0] for name in METRICS}
_HIGH = {name: METRIC_RANGES.get(name, (-math.inf, math.inf))[1] for name in METRICS}
_isfinite = math.isfinite


def validate(record: Any) -> List[str]:
    """Return a list of problems (empty when the record honours the contract).

    A record of an older format version is checked as :func:`upgrade` makes it. Called once per record
    when loading (100k times for a large fleet), so every check is shaped for the valid case: set
    operations in C first, the per-item walk (which words the problems) only when one fails.
    """
    if not isinstance(record, dict):
        return ["record is not a JSON object"]
    try:
        record = upgrade(record)
    except RecordVersionError as exc:
        return [str(exc)]
    errors: List[str] = []
    keys = record.keys()
    if not keys >= _REQUIRED_SET:
        errors += [f"missing field '{key}'" for key in REQUIRED_FIELDS if key not in record]
    if not keys <= _FIELD_SET:
        errors += [f"unknown field '{key}' (data outside the contract goes under 'extra')"
                   for key in keys if key not in _FIELD_SET]
    errors += _type_problems(tuple(keys), tuple(map(type, record.values())))
    version = record.get("schema_version")
    if version is not None and version != SCHEMA_VERSION and not errors:
        errors.append(f"schema_version {version!r} is not {SCHEMA_VERSION}")
    for key, allowed in _ENUMS:
        value = record.get(key)
        if value is not None and value not in allowed:
            errors.append(f"{key} {value!r} is not one of {', '.join(allowed)}")
    if record.get("status") not in (None, "ok") and not record.get("reason"):
        errors.append(f"status {record['status']!r} without a reason")
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        values = metrics.values()
        if not (metrics.keys() <= _METRIC_NAMES and _PLAIN_METRIC_TYPES.issuperset(map(type, values))
                and all(v is None or _LOW[k] <= v <= _HIGH[k] for k, v in metrics.items())):  # NaN: False
            for name, value in metrics.items():
                if name not in METRICS:
                    errors.append(f"unknown metric '{name}'")
                elif value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                    errors.append(f"metric '{name}' is not a number")
                elif value is not None and not _isfinite(value):
                    errors.append(f"metric '{name}' is not finite ({value!r})")
                elif metric_problem(name, value):
                    errors.append(f"metric '{name}': {metric_problem(name, value)}")
        sources = record.get("metric_sources")
        sources = sources if isinstance(sources, dict) else {}
        for name in MEMORY_METRICS:
            if metrics.get(name) is not None and not sources.get(name):
                errors.append(f"memory metric '{name}' has no entry in metric_sources")
    for section in SECTION_KEYS:
        value = record.get(section)
        if isinstance(value, dict) and value:
            errors += _section_problems(section, tuple(value), tuple(map(type, value.values())))
    samples = record.get("samples")
    if isinstance(samples, dict) and samples:
        errors += _sample_problems(samples)
    provenance = record.get("provenance")
    if isinstance(provenance, dict) and provenance.get("status") not in PROVENANCE_STATUSES:
        errors.append(f"provenance.status {provenance.get('status')!r} is not one of {', '.join(PROVENANCE_STATUSES)}")
    if keys >= _IDENTITY_AND_RUN_ID:
        try:
            expected: Optional[str] = run_id(*_identity(record))
        except (TypeError, ValueError):  # e.g. iteration "3": already reported as a type problem above
            expected = None
        if record["run_id"] != expected:
            errors.append(f"run_id {record['run_id']!r} does not match its identity fields ({expected})")
    return errors


def _sample_problems(samples: Dict[str, Any]) -> List[str]:
    errors = []
    for name, values in samples.items():
        if name not in _SAMPLE_NAMES:
            errors.append(f"unknown sample series '{name}' (known: {', '.join(SAMPLES)})")
        elif not isinstance(values, list):
            errors.append(f"samples '{name}' is not a list")
        elif not all(type(v) in (int, float) and _isfinite(v) for v in values):
            errors.append(f"samples '{name}' holds a value that is not a finite number")
    return errors


_JSON_TYPES: Dict[str, Tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value_type: type, types: Any) -> bool:
    """Whether a value of this Python type has one of the JSON ``types`` (a bool is never a number)."""
    if types is None:
        return True
    names = [types] if isinstance(types, str) else types
    for name in names:
        if name in ("integer", "number") and issubclass(value_type, bool):
            continue
        if issubclass(value_type, _JSON_TYPES[name]):
            return True
    return False


# ------------------------------------------------------------------------------------- reading


def checked_record(data: Any) -> Dict[str, Any]:
    """A parsed ``record.json`` as every reader takes it: at the current format version (:func:`upgrade`), its
    metrics outside their physical range left out and named (:func:`screened`), honouring the contract
    (:func:`validate`). Raises :class:`RecordError` naming what makes it unusable."""
    data = upgrade(data)
    if isinstance(data, dict):
        data, _ = screened(data)
    problems = validate(data)
    if problems:
        raise RecordError("; ".join(problems))
    return data


# ------------------------------------------------------------------------------------- writing


class ContractError(ValueError):
    """A record that cannot be written even as a failed run (its identity itself is broken)."""


def sealed(record: RunRecord) -> Tuple[Dict[str, Any], List[str]]:
    """What a producer writes for ``record``: ``(data, problems)``.

    When the record honours the contract, ``data`` is it and ``problems`` is empty. Otherwise ``data`` is
    the same run as ``failed``, its reason naming the contract violation (and the status the run had), its
    figures dropped and every field that broke the contract at its default — a failed run with its
    reason, never a file the loader would skip. Raises :class:`ContractError` when even that is invalid.
    """
    data, _ = screened(record.to_dict())  # a metric outside its physical range: rejected, named, the run kept
    problems = validate(data)
    if not _json_ok(data):
        problems += [f"field '{name}' holds NaN, an infinity or a value JSON cannot hold"
                     for name in FIELD_NAMES if not _json_ok(data[name])]
    if not problems:
        return data, []
    was = data.get("status")
    failed = {**data, "metrics": {}, "metric_sources": {}, "samples": {}}
    for f in _FIELDS:
        if f.name in _IDENTITY_AND_RUN_ID or f.name == "schema_version":
            continue
        value = failed[f.name]
        if not _type_ok(type(value), f.metadata["types"]) or not _json_ok(value) or (
                f.name in SECTION_KEYS and isinstance(value, dict)
                and _section_problems(f.name, tuple(value), tuple(map(type, value.values())))):
            failed[f.name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    failed["status"] = "failed"
    failed["reason"] = "record broke the run-record contract: %s (the run was %s%s)" % (
        "; ".join(problems), was, ": %s" % data["reason"] if isinstance(data.get("reason"), str) else "")
    again = validate(failed)
    if again or not _json_ok(failed):
        raise ContractError("record %r cannot be written: %s" % (data.get("run_id"), "; ".join(again or problems)))
    return failed, problems


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def write_record(path: "str | os.PathLike[str]", record: RunRecord) -> Tuple[Dict[str, Any], List[str]]:
    """Seal ``record`` (see :func:`sealed`) and write it atomically; returns what was written and the
    contract problems that turned it into a failed run (empty when there were none)."""
    data, problems = sealed(record)
    write_json_atomic(path, data)
    return data, problems


def write_json_atomic(path: "str | os.PathLike[str]", data: Any) -> None:
    """Write JSON so a reader (or a crash) never sees half a file (:func:`textfile.write_atomic`; mode 0600,
    as records have always been written)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o600)


if __name__ == "__main__":  # docs/record.schema.json (docs/RECORD.md says how to run it)
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
