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
* **upper bound** = per run, ``cooldown.max_wait_s`` (when the cooldown is on) + ``timeout_s``: no run can take
  longer without being stopped.
"""

from __future__ import annotations

import math
from typing import Any

#: Most runs per host a campaign may plan unless it sets ``max_runs`` higher (README: Limits).
DEFAULT_MAX_RUNS = 10_000
#: Nominal seconds of one run per engine (an assumption, stated in every estimate).
NOMINAL_RUN_S = {"trtllm": 300.0, "hf-generate": 120.0, "matmul": 30.0}
UNKNOWN_ENGINE_S = 300.0


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


def upper_s_per_run(campaign: dict[str, Any]) -> float:
    """The longest one run may take: its longest cooldown and its timeout (also the async limit's base)."""
    cooldown = campaign["cooldown"]
    return (float(cooldown["max_wait_s"]) if cooldown["enabled"] else 0.0) + float(campaign["timeout_s"])


def estimate_s(campaign: dict[str, Any]) -> tuple[float, float]:
    """(typical, upper bound) seconds of one host's runs; see the module doc for the assumptions."""
    per_workload = len(campaign["models"]) * len(campaign["environments"]) * (
        campaign["iterations"] + campaign["warmup_runs"])
    cooldown = campaign["cooldown"]  # resolved: every key present
    wait = max(float(cooldown["min_wait_s"]), float(cooldown["settle_window_s"])) if cooldown["enabled"] else 0.0
    timeout = float(campaign["timeout_s"])
    typical = sum(per_workload * (wait + min(timeout, NOMINAL_RUN_S.get(w.get("engine"), UNKNOWN_ENGINE_S)))
                  for w in campaign["workloads"])
    upper = count_runs(campaign) * upper_s_per_run(campaign)
    return typical, upper


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
    engines = sorted({w.get("engine") for w in campaign["workloads"]}, key=str)
    return (f"estimated about {duration_text(typical)}, at most {duration_text(upper)} per host (typical: "
            "cooldown max(min_wait_s, settle_window_s) + a nominal run of "
            + ", ".join(f"{e} {NOMINAL_RUN_S.get(e, UNKNOWN_ENGINE_S):.0f} s" for e in engines)
            + "; at most: cooldown max_wait_s + timeout_s per run)")


def too_many(runs: int, cap: int) -> str:
    """The refusal of a matrix above ``cap`` runs per host (without the field name)."""
    return (f"the matrix plans {runs:,} runs per host, above the limit of {cap:,} (max_runs, default "
            f"{DEFAULT_MAX_RUNS:,}); shrink iterations, models, environments or workloads, or set max_runs to at "
            "least that number to run it anyway")
