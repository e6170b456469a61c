"""How many runs a campaign plans per host and how long they take, counted before the matrix is expanded.

The matrix is models x environments (A/A twins included) x workloads (memory factors crossed in) x
(iterations + warm-up runs) on every host. :func:`count_runs` multiplies the sizes without building a run,
so a campaign of millions of runs is refused (``max_runs``, :data:`DEFAULT_MAX_RUNS` per host unless the
campaign raises it) in microseconds instead of being planned for minutes.

The duration is an estimate with stated assumptions, per host (hosts run in parallel, so it is also the
campaign's wall time):

* **typical** = per run, the cooldown's shortest wait (``max(min_wait_s, settle_window_s)``: the settle rule
  needs a full window of readings; 0 with the cooldown off) + a nominal run time per engine
  (:data:`NOMINAL_RUN_S`, at most ``timeout_s``). The nominal times are orders of magnitude, not measurements:
  a TensorRT-LLM run starts the engine and loads the model (minutes for 7B-120B models on a DGX Spark).
* **upper bound** = per run, ``cooldown.max_wait_s`` (when the cooldown is on) + its timeout: no run can take
  longer without being stopped.

A **serving run** (an engine server and a load generator through the points of a profile) is estimated from its
profile, as a rough planning figure only: server start (:data:`SERVER_START_S`, per engine) + for every point,
(runs + the client's warm-up run) x (concurrency x (depth + pp) prompt tokens at :data:`PREFILL_TOK_S` + tg
tokens at :data:`DECODE_TOK_S` per request + :data:`POINT_OVERHEAD_S`). The rates are a mid-size model's order
of magnitude on a DGX Spark, not a measurement: prefill at long depth is slower (attention grows with the
context), a prefix cache faster, a small model much faster. Unless the campaign gives ``timeout_s``, a serving
run's timeout is :func:`serving_timeout_s`: its ``ready_timeout_s`` + :data:`SERVING_TIMEOUT_FACTOR` x its
points' estimate, at least the campaign default and at most a week.
"""

from __future__ import annotations

import math
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings

#: Most runs per host a campaign may plan unless it sets ``max_runs`` higher (README: Limits).
DEFAULT_MAX_RUNS = 10_000
#: Nominal seconds of one run per engine (an assumption, stated in every estimate).
NOMINAL_RUN_S = {"trtllm": 300.0, "hf-generate": 120.0, "matmul": 30.0}
UNKNOWN_ENGINE_S = 300.0

#: Serving (rough planning figures, see the module doc): seconds from a server's start to its first answer
#: (loading the weights; vLLM and SGLang also compile and capture CUDA graphs, trtllm-serve builds its engine).
SERVER_START_S = {"llama.cpp": 60.0, "vllm": 300.0, "sglang": 300.0, "trtllm-serve": 600.0}
#: Prompt tokens per second over all concurrent requests, and generated tokens per second of one request.
PREFILL_TOK_S = 2500.0
DECODE_TOK_S = 25.0
#: Seconds per point and pass around the requests (client start, latency probe, result).
POINT_OVERHEAD_S = 2.0
#: llama-benchy runs one discarded warm-up per point before its measured runs (--warmup-runs, default 1:
#: eugr/llama-benchy src/llama_benchy/config.py @22c13d30).
CLIENT_WARMUP_RUNS = 1
#: A serving run's timeout without a campaign timeout_s: this many times its points' estimate (+ ready_timeout_s).
SERVING_TIMEOUT_FACTOR = 3.0
_WEEK_S = 7 * 86400.0


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 0


def raw_count(data: dict[str, Any], iterations: int, warmup_runs: int) -> int:
    """Runs per host of an unresolved campaign mapping, from the sizes of its lists only (the twins and
    factors multiply, never divide): a lower bound that needs no entry checked. 0 when a size is unknown.
    ``iterations``/``warmup_runs``: the campaign's values where they pass their checks, else the defaults."""
    envs = _length(data.get("environments"))
    if data.get("aa") is True:
        envs *= 2
    workloads = _length(data.get("workloads"))
    factors = data.get("factors")
    if isinstance(factors, dict):
        for levels in factors.values():
            workloads *= max(1, _length(levels))
    return _length(data.get("models")) * envs * workloads * (iterations + warmup_runs)


def count_runs(campaign: dict[str, Any]) -> int:
    """Runs per host of a resolved campaign: what ``campaign.plan`` would build, without building it."""
    return (len(campaign["models"]) * len(campaign["environments"]) * len(campaign["workloads"])
            * (campaign["iterations"] + campaign["warmup_runs"]))


def _serving(workload: dict[str, Any]) -> bool:
    return settings.is_serving(workload)


def serving_points(workload: dict[str, Any]) -> int:
    """Points per run of a serving workload: depth x concurrency x pp x tg."""
    return settings.profile_points(workload["profile"])


def serving_requests(workload: dict[str, Any]) -> int:
    """Measured requests per run of a serving workload: runs x the concurrency of every point (warm-ups aside)."""
    profile = workload["profile"]
    return (workload["runs"] * sum(profile["concurrency"]) * len(profile["depth"]) * len(profile["pp"])
            * len(profile["tg"]))


def _points_s(workload: dict[str, Any]) -> float:
    """The client's time through every point of one run (see the module doc)."""
    profile = workload["profile"]
    one_pass = sum(c * (d + pp) / PREFILL_TOK_S + tg / DECODE_TOK_S + POINT_OVERHEAD_S
                   for d in profile["depth"] for c in profile["concurrency"] for pp in profile["pp"]
                   for tg in profile["tg"])
    return one_pass * (workload["runs"] + CLIENT_WARMUP_RUNS)


def serving_run_s(workload: dict[str, Any]) -> float:
    """A rough planning figure for one serving run: server start + its points (see the module doc)."""
    return SERVER_START_S.get(workload.get("engine"), max(SERVER_START_S.values())) + _points_s(workload)


def serving_timeout_s(workload: dict[str, Any], default_s: float) -> float:
    """A serving run's timeout when the campaign gives none: ready_timeout_s + SERVING_TIMEOUT_FACTOR x its
    points' estimate, rounded up to a minute, at least ``default_s`` (the campaign default), at most a week."""
    budget = float(workload["ready_timeout_s"]) + SERVING_TIMEOUT_FACTOR * _points_s(workload)
    return float(min(_WEEK_S, max(float(default_s), 60.0 * math.ceil(budget / 60.0))))


def run_timeout_s(campaign: dict[str, Any], workload: dict[str, Any]) -> float:
    """The timeout of a run of ``workload``: its serving timeout when the campaign computed one (no timeout_s
    given), else the campaign's timeout_s."""
    return float((campaign.get("serving_timeout_s") or {}).get(workload["name"], campaign["timeout_s"]))


def upper_s_per_run(campaign: dict[str, Any], workload: dict[str, Any] | None = None) -> float:
    """The longest one run of ``workload`` (default: the campaign's longest) may take: its longest cooldown and
    its timeout (also the async limit's base)."""
    cooldown = campaign["cooldown"]
    timeout = (run_timeout_s(campaign, workload) if workload is not None else
               max([float(campaign["timeout_s"]), *(campaign.get("serving_timeout_s") or {}).values()]))
    return (float(cooldown["max_wait_s"]) if cooldown["enabled"] else 0.0) + timeout


def typical_run_s(campaign: dict[str, Any], workload: dict[str, Any]) -> float:
    """A typical run of ``workload`` without its cooldown: the serving estimate or the engine's nominal time,
    at most its timeout."""
    nominal = serving_run_s(workload) if _serving(workload) else NOMINAL_RUN_S.get(workload.get("engine"),
                                                                                  UNKNOWN_ENGINE_S)
    return min(run_timeout_s(campaign, workload), nominal)


def estimate_s(campaign: dict[str, Any]) -> tuple[float, float]:
    """(typical, upper bound) seconds of one host's runs; see the module doc for the assumptions."""
    per_workload = len(campaign["models"]) * len(campaign["environments"]) * (
        campaign["iterations"] + campaign["warmup_runs"])
    cooldown = campaign["cooldown"]  # resolved: every key present
    wait = max(float(cooldown["min_wait_s"]), float(cooldown["settle_window_s"])) if cooldown["enabled"] else 0.0
    typical = sum(per_workload * (wait + typical_run_s(campaign, w)) for w in campaign["workloads"])
    upper = sum(per_workload * upper_s_per_run(campaign, w) for w in campaign["workloads"])
    return typical, upper


def serving_summary(campaign: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """What validate and ``sparkfleet plan`` show of a serving workload: points per run (and the profile's
    shape), measured requests per run, the estimated run time and the run's timeout."""
    profile = workload["profile"]
    return {"points": serving_points(workload),
            "shape": " x ".join(f"{len(profile[f.name])} {f.name}" for f in settings.PROFILE_AXES),
            "runs_per_point": workload["runs"], "requests": serving_requests(workload),
            "estimated_s": serving_run_s(workload), "timeout_s": run_timeout_s(campaign, workload)}


def serving_text(campaign: dict[str, Any], workload: dict[str, Any]) -> str:
    """'arena.vllm: 28 points per run (7 depth x 4 concurrency x 1 pp x 1 tg), 378 requests, about 2.2 h per
    run (rough), timeout 6.7 h'."""
    s = serving_summary(campaign, workload)
    return (f"{workload['name']}: {s['points']} points per run ({s['shape']}), {s['requests']} requests "
            f"({s['runs_per_point']} runs per point, plus {CLIENT_WARMUP_RUNS} warm-up each), about "
            f"{duration_text(s['estimated_s'])} per run (a rough planning figure), timeout "
            f"{duration_text(s['timeout_s'])}")


def duration_text(seconds: float) -> str:
    """'45 s', '12 min', '3.5 h', '2.1 days', '3.4 years'."""
    if not math.isfinite(seconds):
        return "unbounded"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds < 2 * 365 * 86400:
        return f"{seconds / 86400:.1f} days"
    return f"{seconds / (365 * 86400):.1f} years"


def estimate_text(campaign: dict[str, Any]) -> str:
    """'about 3.5 h, at most 2.1 days per host (assuming ...)': the line validate and the plan print."""
    typical, upper = estimate_s(campaign)
    engines = sorted({w.get("engine") for w in campaign["workloads"] if not _serving(w)}, key=str)
    serving = [w for w in campaign["workloads"] if _serving(w)]
    runs = (["a nominal run of " + ", ".join(f"{e} {NOMINAL_RUN_S.get(e, UNKNOWN_ENGINE_S):.0f} s" for e in engines)]
            if engines else []) \
        + ([f"a serving run's estimate from its profile (server start, prefill at {PREFILL_TOK_S:.0f} tok/s, "
            f"decode at {DECODE_TOK_S:.0f} tok/s per request)"] if serving else [])
    return (f"estimated about {duration_text(typical)}, at most {duration_text(upper)} per host (typical: "
            "cooldown max(min_wait_s, settle_window_s) + " + " or ".join(runs)
            + "; at most: cooldown max_wait_s + timeout_s per run"
            + (", a serving run's own timeout unless the campaign gives timeout_s)" if serving else ")")
            + "".join(f"; serving {serving_text(campaign, w)}" for w in serving))


def too_many(runs: int, cap: int) -> str:
    """The refusal of a matrix above ``cap`` runs per host (without the field name)."""
    return (f"the matrix plans {runs:,} runs per host, above the limit of {cap:,} (max_runs, default "
            f"{DEFAULT_MAX_RUNS:,}); shrink iterations, models, environments or workloads, or set max_runs to at "
            "least that number to run it anyway")
