"""A synthetic results tree of serving runs (docs: notes/serving-contract.md, "Record"): known values per
(engine, environment, metric), a chosen run-to-run spread, failed points and dead runs where asked.

Each metric's value is ``BASE[metric] x factor(engine, environment, metric, point)`` times a normal
run-to-run noise of relative spread ``cv``: the tests state the factors (a 30% gap, none) and assert what the
report concludes, never the statistic itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines.serving import point_name

CAMPAIGN = "serve"
MODEL = "qwen"
#: A plausible GB10 figure per metric (the scale only; the tests look at ratios).
BASE = {"pp_tok_s": 2400.0, "pp_req_tok_s": 1200.0, "tg_tok_s": 60.0, "tg_req_tok_s": 30.0,
        "peak_tg_tok_s": 66.0, "ttfr_ms": 200.0, "e2e_ttft_ms": 400.0, "est_ppt_ms": 180.0}
PROFILE = {"depth": (0, 4096), "concurrency": (1, 4), "pp": (512,), "tg": (64,)}


def points_of(profile: dict[str, tuple[int, ...]] = PROFILE) -> list[dict[str, int]]:
    return [{"depth": d, "concurrency": c, "pp": p, "tg": t} for d in profile["depth"]
            for c in profile["concurrency"] for p in profile["pp"] for t in profile["tg"]]


#: llama-benchy's --runs of the tree's points (workload_params.runs).
CLIENT_RUNS = 3
#: The figures llama-benchy samples once per request (concurrency x runs values); the others once per run.
PER_REQUEST = ("pp_req_tok_s", "tg_req_tok_s", "ttfr_ms", "e2e_ttft_ms", "est_ppt_ms")


def samples_of(values: dict[str, float], concurrency: int, runs: int = CLIENT_RUNS) -> dict[str, list[float]]:
    """The client's raw values of one point as llama-benchy gives them: ``runs`` per aggregate figure,
    ``concurrency x runs`` per request figure, spread ±1% around the figure (their mean)."""
    out = {}
    for metric, value in values.items():
        n = runs * concurrency if metric in PER_REQUEST else runs
        out[metric] = [value * (0.99 + 0.02 * i / (n - 1)) for i in range(n)] if n > 1 else [value]
    return out


def kind_of(environment: str) -> str:
    return "native" if environment.startswith("native") else "container"


#: The SLA targets of a tree with capacities (the record's serving.sla.targets, as run_launch writes them).
SLA_TARGETS = {"ttft_ms": {"percentile": 99.0, "max": 2000.0}, "tpot_ms": {"percentile": 99.0, "max": 50.0}}
#: A capacity function: (engine, environment, rng) -> the capacity one run's search found.
Capacity = Callable[[str, str, np.random.Generator], int]


def sla_section(capacity: int, cap: int, profile: dict[str, tuple[int, ...]] = PROFILE) -> dict[str, Any]:
    """The record's serving.sla of a run whose search found ``capacity`` for every (depth, pp, tg) (the levels
    measured are not the report's business and left empty)."""
    groups = [{"depth": d, "pp": p, "tg": t, "capacity": capacity, "cap": cap, "measured": [], "stopped": None}
              for d in profile["depth"] for p in profile["pp"] for t in profile["tg"]]
    return {"targets": SLA_TARGETS, "max_concurrency": cap, "groups": groups}


def serving_record(engine: str, environment: str, iteration: int, order: int, rng: np.random.Generator,
                   factor: Callable[[str, str, str, dict[str, int]], float], cv: float,
                   failed: Iterable[str] = (), dead: bool = False, host: str = "spark-01",
                   aa: dict[str, str] | None = None, profile: dict[str, tuple[int, ...]] = PROFILE,
                   sla: tuple[Capacity, int] | None = None) -> dict[str, Any]:
    """One serving run's record: every point ok unless named in ``failed``; ``dead``: the server never came
    up (no point ok, status failed as the producer writes it); ``sla``: (capacity function, cap), a search's
    outcome per (depth, pp, tg)."""
    workload = f"serve-quick.{engine}"
    points = []
    for index, p in enumerate(points_of(profile)):
        name = point_name(**p)
        entry: dict[str, Any] = {"point": name, **p, "order": index, "raw": f"points/{name}.json",
                                 "duration_s": 5.0}
        if dead:
            entry |= {"status": "failed", "reason": "server not ready", "metrics": {}, "samples": {}}
        elif name in failed:  # a client that failed part-way may leave figures behind: they must not count
            entry |= {"status": "failed", "reason": "client exited 1: timeout",
                      "metrics": {m: BASE[m] * 10 for m in BASE}, "samples": {}}
        else:
            values = {m: BASE[m] * factor(engine, environment, m, p) * (1 + rng.normal(0, cv)) for m in BASE}
            entry |= {"status": "ok", "reason": None, "metrics": values,
                      "samples": samples_of(values, p["concurrency"])}
        points.append(entry)
    failed_names = [e["point"] for e in points if e["status"] != "ok"]
    status, reason = "ok", None
    if dead:
        status, reason = "failed", "server never became ready (server.log: address in use)"
    elif failed_names:
        reason = f"failed points: {', '.join(failed_names)}"
    memory = {"environment": {"kind": kind_of(environment), **(aa or {})}}
    rec = contract.new_record(CAMPAIGN, host, MODEL, environment, workload, iteration).to_dict()
    rec |= {"environment_kind": kind_of(environment), "engine": engine, "order_index": order,
            "started_utc": f"2026-01-10T{order // 60 % 24:02d}:{order % 60:02d}:00Z", "status": status,
            "reason": reason, "exit_code": 0 if not dead else 1,
            "workload_params": {"engine": engine, "runs": CLIENT_RUNS, "prefix_caching": False},
            "metrics": {"kv_cache_gib": 40.0}, "metric_sources": {"kv_cache_gib": "server.log"},
            "samples": {}, "memory": memory,
            "serving": {"engine": engine, "server": {"port": 8000, "ready_s": 2.0, "stopped": "terminated"},
                        "client": {"name": "llama-benchy", "version": "0.4.0"}, "kv": {"kv_cache_gib": 40.0},
                        "point_order_seed": 1234, "points": points}}
    if sla is not None and not dead:
        rec["serving"]["sla"] = sla_section(sla[0](engine, environment, rng), sla[1], profile)
    return rec


def no_difference(engine: str, environment: str, metric: str, point: dict[str, int]) -> float:
    return 1.0


def build_serving_tree(root: Path, *, engines: tuple[str, ...] = ("vllm", "llama.cpp"),
                       environments: tuple[str, ...] = ("native", "container"), iterations: int = 5,
                       factor: Callable[[str, str, str, dict[str, int]], float] = no_difference, cv: float = 0.01,
                       failed: dict[tuple[str, str, int], tuple[str, ...]] | None = None,
                       dead: Iterable[tuple[str, str, int]] = (), aa_pairs: dict[str, str] | None = None,
                       seed: int = 0, hosts: tuple[str, ...] = ("spark-01",),
                       profile: dict[str, tuple[int, ...]] = PROFILE,
                       sla: tuple[Capacity, int] | None = None) -> Path:
    """Write the runs, interleaved (iteration-major, as the planner orders them) under ``root``.

    ``failed``: (engine, environment, iteration) -> point names that fail in that run; ``dead``: runs whose
    server never came up; ``aa_pairs``: A/A twin environment -> its original (both get aa_group/aa_member);
    ``sla``: (capacity function, cap): each run's SLA search outcome (serving_record)."""
    rng = np.random.default_rng(seed)
    failed, dead, aa_pairs = failed or {}, set(dead), aa_pairs or {}
    marks = {twin: {"aa_group": original, "aa_member": "b"} for twin, original in aa_pairs.items()}
    marks |= {original: {"aa_group": original, "aa_member": "a"} for original in aa_pairs.values()}
    order = 0
    for iteration in range(1, iterations + 1):
        for host in hosts:
            for engine in engines:
                for environment in environments:
                    rec = serving_record(engine, environment, iteration, order, rng, factor, cv,
                                         failed.get((engine, environment, iteration), ()),
                                         (engine, environment, iteration) in dead, host, marks.get(environment),
                                         profile, sla)
                    contract.write_json_atomic(root / host / "runs" / rec["run_id"] / "record.json", rec)
                    order += 1
    return root
