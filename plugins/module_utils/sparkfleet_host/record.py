"""The run-record contract (DESIGN.md, "Run record"): names, units, identity and atomic writes.

A record is a plain JSON object so that Ansible modules (which may run on a host without this package)
and the aggregator agree on one shape; ``record.schema.json`` beside this file is the machine-readable
form and `validate` checks a record against it without third-party code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import re
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

#: Metric name -> unit. Fixed names; every record's ``metrics`` object uses only these keys.
METRICS: dict[str, str] = {
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
    # matmul sanity workload
    "gflops": "GFLOP/s",
    "matmul_s_mean": "s",
}

#: Memory metrics must say where their figure came from (log line, report json, telemetry, ...).
MEMORY_METRICS = ("peak_memory_gib", "kv_cache_gib", "device_total_gib", "kv_fraction")

STATUSES = ("ok", "failed", "timeout", "invalid")
ENVIRONMENT_KINDS = ("native", "container", "bare")

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


@functools.cache
def schema() -> dict[str, Any]:
    """The JSON schema, parsed once per process (loading 100k records calls validate 100k times)."""
    return json.loads((Path(__file__).with_name("record.schema.json")).read_text())


@functools.cache
def _rules() -> tuple[tuple[str, ...], frozenset[str], tuple[tuple[str, Any], ...]]:
    """The schema as `validate` uses it, derived once per process: the required keys (in schema order, and
    as a set for one subset test) and the properties that name a type, with that type."""
    sch = schema()
    required = tuple(sch["required"])
    typed = tuple((key, spec["type"]) for key, spec in sch["properties"].items() if spec.get("type") is not None)
    return required, frozenset(required), typed


@functools.lru_cache(maxsize=256)
def _type_problems(keys: tuple[str, ...], value_types: tuple[type, ...]) -> tuple[str, ...]:
    """Type problems of a record with these keys and these Python types of its values, in schema order.

    Whether a value has its property's JSON type depends on the value's Python type alone, and the records
    of one producer share keys and types: so this runs once per record shape, not once per record.
    """
    present = {key: value_types[i] for i, key in enumerate(keys)}
    return tuple(
        f"field '{key}' has type {present[key].__name__}, expected {types}"
        for key, types in _rules()[2]
        if key in present and not _type_ok(present[key], types)
    )


_IDENTITY_AND_RUN_ID = frozenset((*IDENTITY_FIELDS, "run_id"))
_identity = operator.itemgetter(*IDENTITY_FIELDS)
_METRIC_NAMES = frozenset(METRICS)
#: Metric value types accepted without a closer look (bool, an int subclass, is accepted by the slow path).
_PLAIN_METRIC_TYPES = frozenset((int, float, type(None)))


def validate(record: Any) -> list[str]:
    """Return a list of problems (empty when the record honours the contract).

    Called once per record when loading (100k times for a large fleet), so every check is shaped for the
    valid case: set operations in C first, the per-item walk (which words the problems) only when one fails.
    """
    errors: list[str] = []
    if not isinstance(record, dict):
        return ["record is not a JSON object"]
    required, required_set, _ = _rules()
    keys = record.keys()
    if not keys >= required_set:
        errors += [f"missing field '{key}'" for key in required if key not in record]
    errors += _type_problems(tuple(keys), tuple(map(type, record.values())))
    if record.get("schema_version") not in (None, SCHEMA_VERSION):
        errors.append(f"schema_version {record.get('schema_version')!r} is not {SCHEMA_VERSION}")
    if "status" in record and record["status"] not in STATUSES:
        errors.append(f"status {record['status']!r} is not one of {', '.join(STATUSES)}")
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        if not (metrics.keys() <= _METRIC_NAMES and _PLAIN_METRIC_TYPES.issuperset(map(type, metrics.values()))):
            for name, value in metrics.items():
                if name not in METRICS:
                    errors.append(f"unknown metric '{name}'")
                elif value is not None and not isinstance(value, (int, float)):
                    errors.append(f"metric '{name}' is not a number")
        sources = record.get("metric_sources") or {}
        for name in MEMORY_METRICS:
            if metrics.get(name) is not None and not sources.get(name):
                errors.append(f"memory metric '{name}' has no entry in metric_sources")
    if keys >= _IDENTITY_AND_RUN_ID:
        try:
            expected: str | None = run_id(*_identity(record))
        except (TypeError, ValueError):  # e.g. iteration "3": already reported as a type problem above
            expected = None
        if record["run_id"] != expected:
            errors.append(f"run_id {record['run_id']!r} does not match its identity fields ({expected})")
    return errors


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value_type: type, types: str | list[str] | None) -> bool:
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


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON so a reader (or a crash) never sees half a file: temp file, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
