# Copyright: sparkfleet contributors
# Apache-2.0
"""The readiness probe's judgement: is the SM clock (and, optionally, the power) a host reached under the
probe's short fixed GPU load what it should be? Pure functions; the probe that runs the load and reads the
sensor lives elsewhere.

:func:`judge` returns ``{"state": "healthy" | "suspect" | "unknown", "reasons": [...], ...}``; each reason
is ``{"cause": ..., "message": ...}`` with ``cause`` one of

* ``"below_fraction"``: the clock under load is below ``min_fraction`` of the expected clock;
* ``"degraded_band"``: the clock lies in a known degraded band (default: the 690-890 MHz band DGX Spark
  owners report under load, from USB-PD / power-delivery caps: 2223 MHz idle falling to 890 -> 695 MHz at 96%
  utilisation, and "clocks steady at ~690 MHz");
* ``"lost_cap"``: sparkfleet applied a clock lock and the clock reached under load is not at it: above it by
  more than the tolerance (the cap is gone: a hang or a reboot lost it) or below it by more than the
  tolerance (the lock is not in force: GB10 accepts ``-lgc 3003,3003`` and then runs at ~2520 MHz);
* ``"low_power"``: the power under load is below ``min_power_w`` (only when that is set);
* ``"missing_reading"`` / ``"no_expected_clock"``: a figure needed for a check is absent (state
  ``"unknown"`` unless another check already failed).

:func:`action` maps a verdict to what the run should do under the campaign's policy (``"mark"``, the
default: run, mark the result suspect and warn; ``"refuse"``: do not run on that host).

On the expected clock: a campaign's reference clock under load (a previous campaign, the fleet median) is
the right yardstick, with :data:`DEFAULT_MIN_FRACTION` 0.9. When only the host's *maximum* SM clock is known,
use :data:`DEFAULT_MIN_FRACTION_OF_MAX` 0.75 (``expected_source="max_clock"``): a healthy GB10 sustains about
2,420-2,520 MHz under a dense load against a 3,003 MHz maximum (0.81-0.84), while the degraded band is below
0.3 of it. An applied lock caps the expectation: the fraction check compares against
``min(expected, lock)``, so a deliberately capped host is not "below fraction".

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

#: Minimum fraction of a campaign's reference clock under load.
DEFAULT_MIN_FRACTION = 0.9
#: Minimum fraction of the host's maximum SM clock, when that is all that is known.
DEFAULT_MIN_FRACTION_OF_MAX = 0.75
#: Known degraded SM-clock bands under load (MHz, inclusive): DGX Spark's stuck low-power band.
DEFAULT_DEGRADED_BANDS: Tuple[Tuple[float, float], ...] = ((690.0, 890.0),)
#: How far (fraction of the lock) the clock under load may sit from an applied lock.
DEFAULT_LOCK_TOLERANCE = 0.03
#: Policies for a suspect host; ``mark`` is the default.
POLICIES = ("mark", "refuse")
EXPECTED_SOURCES = ("campaign", "max_clock")

STATES = ("healthy", "suspect", "unknown")

Number = Union[int, float]
Lock = Union[Number, Sequence[Number]]


def _reason(cause: str, message: str) -> Dict[str, str]:
    return {"cause": cause, "message": message}


def _positive(name: str, value: Optional[Number]) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError("%s: not a number: %r" % (name, value))
    if value <= 0:
        raise ValueError("%s: must be > 0, got %r" % (name, value))
    return float(value)


def _bands(bands: Iterable[Sequence[Number]]) -> List[Tuple[float, float]]:
    out = []
    for band in bands:
        try:
            low, high = (float(b) for b in band)
        except (TypeError, ValueError):
            raise ValueError("degraded_bands: each band must be (low_mhz, high_mhz), got %r" % (band,)) from None
        if not 0 <= low <= high:
            raise ValueError("degraded_bands: band %r must satisfy 0 <= low <= high" % (band,))
        out.append((low, high))
    return out


def _lock_target(applied_lock: Optional[Lock]) -> Optional[float]:
    """The clock a lock should hold under a full load: the upper end of ``-lgc min,max`` (or the one value)."""
    if applied_lock is None:
        return None
    if isinstance(applied_lock, (int, float)) and not isinstance(applied_lock, bool):
        return _positive("applied_lock_mhz", applied_lock)
    try:
        values = [float(v) for v in applied_lock]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError("applied_lock_mhz: a number or (min_mhz, max_mhz), got %r" % (applied_lock,)) from None
    if len(values) != 2 or values[0] > values[1] or values[1] <= 0:
        raise ValueError("applied_lock_mhz: (min_mhz, max_mhz) with 0 < max and min <= max, got %r"
                         % (applied_lock,))
    return values[1]


def judge(sm_clock_mhz: Optional[Number], power_w: Optional[Number] = None, *,
          expected_sm_clock_mhz: Optional[Number] = None, expected_source: str = "campaign",
          min_fraction: Optional[float] = None,
          degraded_bands: Iterable[Sequence[Number]] = DEFAULT_DEGRADED_BANDS,
          applied_lock_mhz: Optional[Lock] = None, lock_tolerance: float = DEFAULT_LOCK_TOLERANCE,
          min_power_w: Optional[Number] = None) -> Dict[str, Any]:
    """The probe's verdict for one GPU. ``sm_clock_mhz`` and ``power_w`` are what the probe read under its
    load (a representative value, e.g. the median of its samples); ``None`` means no reading.

    Returns ``{"state", "reasons", "sm_clock_mhz", "power_w", "expected_sm_clock_mhz", "expected_source",
    "min_fraction", "effective_expected_mhz", "applied_lock_mhz", "fraction"}`` (JSON-able). Raises
    ValueError (one line naming the argument) on a bad argument."""
    if expected_source not in EXPECTED_SOURCES:
        raise ValueError("expected_source: one of %s, got %r" % (", ".join(EXPECTED_SOURCES), expected_source))
    if min_fraction is None:
        min_fraction = DEFAULT_MIN_FRACTION if expected_source == "campaign" else DEFAULT_MIN_FRACTION_OF_MAX
    if isinstance(min_fraction, bool) or not isinstance(min_fraction, (int, float)) or not 0 < min_fraction <= 1:
        raise ValueError("min_fraction: a number in (0, 1], got %r" % (min_fraction,))
    if isinstance(lock_tolerance, bool) or not isinstance(lock_tolerance, (int, float)) \
            or not 0 <= lock_tolerance < 1:
        raise ValueError("lock_tolerance: a number in [0, 1), got %r" % (lock_tolerance,))
    clock = _positive("sm_clock_mhz", sm_clock_mhz) if sm_clock_mhz is not None else None
    if power_w is not None and (isinstance(power_w, bool) or not isinstance(power_w, (int, float))
                                or power_w != power_w or power_w < 0):
        raise ValueError("power_w: a number >= 0, got %r" % (power_w,))
    expected = _positive("expected_sm_clock_mhz", expected_sm_clock_mhz)
    bands = _bands(degraded_bands)
    lock = _lock_target(applied_lock_mhz)
    floor_w = _positive("min_power_w", min_power_w)

    failed: List[Dict[str, str]] = []
    unknown: List[Dict[str, str]] = []
    effective = None if expected is None else (min(expected, lock) if lock is not None else expected)
    fraction = None

    if clock is None:
        unknown.append(_reason("missing_reading", "no SM clock reading under load"))
    else:
        for low, high in bands:
            if low <= clock <= high:
                failed.append(_reason("degraded_band", "SM clock under load %.0f MHz is in the known degraded "
                                                       "band %.0f-%.0f MHz" % (clock, low, high)))
        if effective is None:
            unknown.append(_reason("no_expected_clock", "no expected SM clock to compare %.0f MHz with" % clock))
        else:
            fraction = clock / effective
            source = "applied lock" if lock is not None and expected is not None and lock < expected \
                else expected_source
            if fraction < min_fraction:
                failed.append(_reason("below_fraction", "SM clock under load %.0f MHz is %.0f%% of the expected "
                                                        "%.0f MHz (%s); minimum %.0f%%"
                                      % (clock, 100 * fraction, effective, source, 100 * min_fraction)))
        if lock is not None:
            slack = lock * lock_tolerance
            if clock > lock + slack:
                failed.append(_reason("lost_cap", "SM clock under load %.0f MHz exceeds the applied lock %.0f MHz "
                                                  "by more than %.0f MHz: the cap is no longer in force"
                                      % (clock, lock, slack)))
            elif clock < lock - slack:
                failed.append(_reason("lost_cap", "SM clock under load %.0f MHz does not reach the applied lock "
                                                  "%.0f MHz (tolerance %.0f MHz): the lock is not in force"
                                      % (clock, lock, slack)))
    if floor_w is not None:
        if power_w is None:
            unknown.append(_reason("missing_reading", "no power reading under load (minimum %.0f W set)"
                                   % floor_w))
        elif power_w < floor_w:
            failed.append(_reason("low_power", "power under load %.1f W is below the minimum %.0f W"
                                  % (power_w, floor_w)))

    state = "suspect" if failed else ("unknown" if unknown else "healthy")
    return {
        "state": state,
        "reasons": failed + unknown,
        "sm_clock_mhz": clock,
        "power_w": None if power_w is None else float(power_w),
        "expected_sm_clock_mhz": expected,
        "expected_source": expected_source,
        "min_fraction": float(min_fraction),
        "effective_expected_mhz": effective,
        "applied_lock_mhz": lock,
        "fraction": fraction,
    }


def action(verdict: Mapping[str, Any], policy: str = "mark", refuse_unknown: bool = False) -> Dict[str, Any]:
    """What to do with the run: ``{"action": "run" | "mark" | "refuse", "warn": bool, "state", "reasons"}``.

    healthy -> run; suspect -> ``mark`` (run, result marked ``suspect``, warn) or ``refuse`` per ``policy``;
    unknown -> mark and warn (``refuse`` only with ``refuse_unknown`` under the ``refuse`` policy: a host
    whose sensor gives nothing is not silently averaged in, nor blocked by default)."""
    if policy not in POLICIES:
        raise ValueError("policy: one of %s, got %r" % (", ".join(POLICIES), policy))
    state = verdict.get("state")
    if state not in STATES:
        raise ValueError("verdict.state: one of %s, got %r" % (", ".join(STATES), state))
    if state == "healthy":
        decided = "run"
    elif state == "suspect":
        decided = policy
    else:
        decided = "refuse" if (policy == "refuse" and refuse_unknown) else "mark"
    return {"action": decided, "warn": decided != "run", "state": state,
            "reasons": list(verdict.get("reasons") or [])}
