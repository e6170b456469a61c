# -*- coding: utf-8 -*-
"""The SLA question (issue 37 item 3): the largest concurrency a server sustains within latency targets.

A serving workload's ``sla`` names the targets: ``ttft_ms`` and/or ``tpot_ms``, each ``{percentile, max}``
(the percentile of the point's per-request values, 50..99.9, at most ``max`` milliseconds), and optionally
``max_concurrency``. After the profile's points, each (depth, pp, tg) of the profile is searched over concurrency
(:class:`Bracket`): doubling from the profile's lowest concurrency until a level fails or the cap (``max_concurrency``,
else the profile's highest) is reached, then bisection between the last level that passed and the first that
failed. A level the profile already measured is read, never run again; every level the search ran is an ordinary
point of the record, marked ``sla_probe: true``; a level whose point failed or whose latency cannot be read (an
error or an unknown, not a latency miss) stops the search, its reason kept as ``stopped``. The latencies at the
targets' percentiles come from the client's own data, one function per client (serving_client's drivers'
``sla_latencies``). :func:`group_section` is what the
record keeps per (depth, pp, tg): ``capacity`` (the largest passing concurrency, 0 when none passed) and
``measured``.
"""

from __future__ import annotations

import math
from typing import Optional

#: The latency targets a workload's sla may hold, and the range of their percentile.
TARGETS = ("ttft_ms", "tpot_ms")
PERCENTILE_RANGE = (50.0, 99.9)
#: The most concurrent requests a search may reach (a workload's max_concurrency).
MAX_CONCURRENCY = 65536


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sla_problem(value) -> Optional[str]:
    """Why ``value`` is not an sla (None when it is): a mapping of ``ttft_ms`` and/or ``tpot_ms``, each
    {percentile: 50..99.9, max: > 0 ms}, and an optional ``max_concurrency`` (1..65536)."""
    if not isinstance(value, dict):
        return "must be a mapping {ttft_ms, tpot_ms, max_concurrency}, got %r" % (value,)
    unknown = sorted(set(value) - set(TARGETS) - {"max_concurrency"})
    if unknown:
        return "unknown key %s (known: %s, max_concurrency)" % (", ".join(map(str, unknown)), ", ".join(TARGETS))
    if not any(value.get(t) is not None for t in TARGETS):
        return "names no target: give ttft_ms and/or tpot_ms, each {percentile, max}"
    for name in TARGETS:
        target = value.get(name)
        if target is None:
            continue
        if not isinstance(target, dict) or set(target) != {"percentile", "max"}:
            return "%s must be {percentile, max}, got %r" % (name, target)
        low, high = PERCENTILE_RANGE
        if not _number(target["percentile"]) or not low <= target["percentile"] <= high:
            return "%s.percentile must be a number in %g..%g, got %r" % (name, low, high, target["percentile"])
        if not _number(target["max"]) or target["max"] <= 0:
            return "%s.max must be a positive number of milliseconds, got %r" % (name, target["max"])
    cap = value.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_CONCURRENCY):
        return "max_concurrency must be an integer in 1..%d, got %r" % (MAX_CONCURRENCY, cap)
    return None


def targets(sla: dict) -> dict:
    """The targets the sla names: {name: {percentile, max}}."""
    return {name: dict(sla[name]) for name in TARGETS if sla.get(name) is not None}


def percentile(values: list, q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) of ``values``, linear between the order statistics (numpy's default,
    Hyndman and Fan's type 7); None for no values."""
    data = sorted(float(v) for v in values if _number(v))
    if not data:
        return None
    rank = (len(data) - 1) * q / 100.0
    below = int(math.floor(rank))
    above = min(below + 1, len(data) - 1)
    return data[below] + (data[above] - data[below]) * (rank - below)


def passes(latencies: dict, goals: dict) -> bool:
    """Whether every target is met: each latency known and at most its ``max``."""
    return all(latencies.get(name) is not None and latencies[name] <= goal["max"] for name, goal in goals.items())


class Bracket:
    """The search over concurrency between ``low`` (the profile's lowest) and ``cap``: :meth:`next` gives the
    level to measure (None once settled), :meth:`record` its outcome; :attr:`capacity` the largest level that
    passed (0 when none did)."""

    def __init__(self, low: int, cap: int):
        self.low, self.cap = int(low), max(int(low), int(cap))
        self.passed = 0  # the largest level that passed
        self.failed = None  # the smallest level that failed
        self.level = self.low

    def next(self) -> Optional[int]:
        if self.failed is None:  # doubling
            return None if self.passed >= self.cap else self.level
        if self.failed - self.passed <= 1:
            return None
        return (self.passed + self.failed) // 2  # bisection (from 0 when the lowest level failed)

    def record(self, level: int, ok: bool) -> None:
        if ok:
            self.passed = max(self.passed, level)
            if self.failed is None:
                self.level = min(level * 2, self.cap)
        else:
            self.failed = level if self.failed is None else min(self.failed, level)

    @property
    def capacity(self) -> int:
        return self.passed


def cap_of(sla: dict, concurrencies: list) -> int:
    """The search's cap: the sla's max_concurrency, else the profile's highest concurrency."""
    return int(sla.get("max_concurrency") or max(concurrencies))


def measured_entry(point: dict, latencies: dict, ok: bool) -> dict:
    """One level of a search as the record keeps it: {concurrency, point, ttft_ms, tpot_ms, pass}."""
    return {"concurrency": point["concurrency"], "point": point["point"], "ttft_ms": latencies.get("ttft_ms"),
            "tpot_ms": latencies.get("tpot_ms"), "pass": bool(ok)}


def group_section(depth, pp, tg, search: Bracket, measured: list, stopped=None) -> dict:
    """The record's entry of one (depth, pp, tg) search: its capacity and every level measured, in order;
    ``stopped``: why the search ended before it settled (the run's time, the server gone), else None."""
    return {"depth": depth, "pp": pp, "tg": tg, "capacity": search.capacity, "cap": search.cap,
            "measured": measured, "stopped": stopped}
