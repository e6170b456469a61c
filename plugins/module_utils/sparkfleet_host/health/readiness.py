# Copyright: sparkfleet contributors
# Apache-2.0
"""The readiness probe's judgement (issue 24; rebuilt on the rules trusted tools use in issue 32): is the GPU
healthy under the probe's short fixed load? Pure functions; the probe that runs the load and reads the sensors
lives in host_state.py.

No trusted tool judges the SM clock divided by the maximum clock, and neither does :func:`judge` (a healthy H100
at 698.9 W of its 700 W cap runs at 70% of its maximum clock; a Spark its owner caps at 2,100 MHz at 70% of
3,003). The rules, with their sources (read 2026-11-27, copied here from the project's field notes, section A):

1. ``invalid`` - the load did not run: the median GPU utilisation under it is below 90%, or the GPU_IDLE
   clock-event reason is active in most samples. Then only the faults of rule 2 are judged.
2. ``suspect``, a fault - DCGM's throttle check (NVIDIA/DCGM 4.6.0 ``DcgmRecorder::CheckForClocksEvent``, mask
   0xE8 in ``ParsingUtility.h``: HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE; SW power cap, application
   clocks, idle and sync boost are not faults): the SW-thermal, HW-thermal and HW-power-brake counters together
   grew by more than 1% of the probe's own window, or HW_SLOWDOWN is active in 2 or more consecutive samples (it
   may flash during a P-state change). Without counters, those three reasons active in 2 or more consecutive
   samples.
3. power-limited and healthy - SW_POWER_CAP active in most samples (or its counter over half the window) and the
   mean power at least 0.9 x the enforced power limit (a limit sparkfleet applied stands in for an unread
   enforced one): the clock is what the power allows and is not judged (deepseek-ai/DeepGEMM #120: 1980 ->
   1575 MHz over the limit, "expected"; stas00/ml-engineering: an H200 sustains bf16 at ~1440-1465 MHz; our H100
   on 2026-11-27: 1388-1560 MHz at 698.9 W of 700 W, 663 TFLOP/s).
4. ``suspect``, degraded - otherwise the median SM clock below the class floor (GB10: 1400 MHz, the default of the
   Spark community check parallelArchitect/spark-gpu-throttle-check; H100/H200 and other GPUs: 0.6 x the maximum
   SM clock) or in a known degraded band (GB10: 500-890 MHz: that check's README 500-850 MHz,
   hasso5703/dgx-spark-qwen38 #8 890 -> 695 MHz at 96% utilisation) - except at or below a clock lock sparkfleet
   applied itself (a check whose band or floor lies at or above the lock's maximum is skipped). With such a lock
   the expectation is min(lock max, the class's healthy clock); below 0.9 x that is a note, never a fault (an
   H200 at 700 W "cannot reliably sustain a locked 1830 MHz": tile-ai/TileOPs #1587). A clock above the lock by
   more than the tolerance is ``lost_cap`` (suspect: gpu_control re-applies the lock once and probes again).
5. ``suspect``, low throughput - delivered TFLOP/s below 0.71 x the class reference (DCGM's targeted_stress passes
   at 0.95 x target_stress, itself 0.75 x a measured peak: TargetedStress_wrapper.cpp, diag-skus.yaml.in), the
   reference scaled by enforced limit / reference power when the limit is lower. H100 SXM and H200 (700 W): 700
   TFLOP/s bf16 sustained (ml-engineering: H200 bf16 MSMF 702.9 TFLOPS; the GPU example's H200 640-655 and our
   H100 663 TFLOP/s at 4096^2). GB10: no published sustained figure, so only its peers judge it: below 0.9 x the
   median of the fleet's peers (SuperBench's ``sb result diagnosis``, a variance rule against a baseline) is a
   note that warns (:func:`compare_to_peers` for the controller, ``peer_tflops`` here).

The clock against the expected clock (a campaign reference, else the maximum) stays as an informational note
(``below_fraction``). ``unknown``: no SM clock reading under load (and not power-limited), or nothing to judge
it by (no class floor, no clock-event reasons or counters, no throughput reference). A power floor
(``min_power_w``) a caller sets is still a fault below it (``low_power``).

:func:`judge` returns ``{"state": "healthy" | "suspect" | "invalid" | "unknown", "reasons": [...], "notes": [...],
...}``; each reason and note is ``{"cause": ..., "message": ...}``. Causes: ``thermal_or_power_brake``,
``hw_slowdown``, ``degraded_band``, ``below_class_floor``, ``low_tflops``, ``lost_cap``, ``low_power`` (suspect);
``load_not_running``, ``gpu_idle`` (invalid); ``missing_reading``, ``no_clock_floor`` (unknown). Notes:
``below_fraction``, ``below_lock``, ``below_peers``, ``power_limit_not_applied``, ``no_clock_event_reasons``.

:func:`action` maps a verdict to what the run should do under the campaign's policy (``"mark"``, the
default: run, mark the result suspect and warn; ``"refuse"``: do not run on that host).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..sensors.gpu import THROTTLE_REASONS

#: The longest probe load (s) a host runs: host_state refuses a longer one, the settings' range ends here (one
#: home for both; ``sparkfleet_readiness_probe_s``).
PROBE_S_MAX = 60.0

#: Minimum fraction of a campaign's reference clock under load (the ``below_fraction`` note).
DEFAULT_MIN_FRACTION = 0.9
#: Minimum fraction of the host's maximum SM clock (the note), when that is all that is known.
DEFAULT_MIN_FRACTION_OF_MAX = 0.75
#: Known degraded SM-clock bands under load (MHz, inclusive) of a DGX Spark (GB10): 500-890 MHz (rule 4).
DEFAULT_DEGRADED_BANDS: Tuple[Tuple[float, float], ...] = ((500.0, 890.0),)
#: How far (fraction of the lock) the clock under load may sit above an applied lock.
DEFAULT_LOCK_TOLERANCE = 0.03
#: Policies for a suspect host; ``mark`` is the default.
POLICIES = ("mark", "refuse")
EXPECTED_SOURCES = ("campaign", "max_clock")

STATES = ("healthy", "suspect", "invalid", "unknown")

#: Clock-event reason names (gpu.THROTTLE_REASONS, the one table of the NVML bits).
GPU_IDLE, SW_POWER_CAP, HW_SLOWDOWN = THROTTLE_REASONS[0x1], THROTTLE_REASONS[0x4], THROTTLE_REASONS[0x8]
#: DCGM's failing clock-event reasons (rule 2).
FAULT_MASK = 0xE8
FAULT_REASONS = tuple(name for bit, name in sorted(THROTTLE_REASONS.items()) if bit & FAULT_MASK)
#: The cumulative counters of the three fault reasons with one (gpu.CLOCK_EVENT_COUNTER_FIELDS names; HW_SLOWDOWN
#: has none of its own) and of the SW power cap.
FAULT_COUNTERS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_braking")
POWER_CAP_COUNTER = "sw_power_capping"

#: Rule 1: least median GPU utilisation (%) of a load that ran; rules 1 and 3: "most samples".
MIN_UTILIZATION_PCT = 90.0
DOMINANT_SHARE = 0.5
#: Rule 2: fault counters' growth over the window (fraction), and consecutive samples that make HW_SLOWDOWN a fault.
FAULT_WINDOW_FRACTION = 0.01
SUSTAINED_SAMPLES = 2
#: Rule 3: mean power at least this fraction of the enforced limit.
POWER_LIMITED_FRACTION = 0.9
#: Rule 4: the floor of classes without an absolute one, as a fraction of the maximum SM clock; a clock below
#: this fraction of the lock's expectation is noted.
FLOOR_FRACTION_OF_MAX = 0.6
LOCK_NOTE_FRACTION = 0.9
#: Rule 5: the DCGM-equivalent floor (0.95 x 0.75), and the peers' note.
TFLOPS_FLOOR_FRACTION = 0.71
PEER_MIN_FRACTION = 0.9
#: The load a class's TFLOP/s reference holds for: gpu_probe.py's torch bf16 products of at least 4096^2.
REFERENCE_DTYPE = "bf16"
REFERENCE_MIN_SIZE = 4096

#: Per class: ``clock_floor_mhz`` (absolute) or ``floor_fraction_of_max``; ``bands`` (whether the degraded bands
#: apply); ``healthy_clock_mhz`` (a healthy clock under a dense load, for a lock's expectation); ``tflops_reference``
#: (sustained bf16 TFLOP/s) at ``reference_power_w``. Sources: the module docstring.
GPU_CLASSES: Dict[str, Dict[str, Optional[Any]]] = {
    # DGX Spark: healthy under load ~2400-2515 MHz of 3003 (open-gpu-kernel-modules #1358; the community check:
    # healthy USB-PD ~2400 MHz); NVML exposes no power limit on GB10.
    "gb10": {"clock_floor_mhz": 1400.0, "floor_fraction_of_max": None, "bands": True, "healthy_clock_mhz": 2400.0,
             "tflops_reference": None, "reference_power_w": None},
    # H100 SXM (80GB HBM3) and H200: 700 W boards (DCGM diag-skus.yaml.in); sustained ~1440 MHz (ml-engineering).
    "hopper-700w": {"clock_floor_mhz": None, "floor_fraction_of_max": FLOOR_FRACTION_OF_MAX, "bands": False,
                    "healthy_clock_mhz": 1440.0, "tflops_reference": 700.0, "reference_power_w": 700.0},
    # Any other named GPU (H100 PCIe/NVL, H200 NVL, GH200, ...): the datacenter floor, no reference.
    "other": {"clock_floor_mhz": None, "floor_fraction_of_max": FLOOR_FRACTION_OF_MAX, "bands": False,
              "healthy_clock_mhz": None, "tflops_reference": None, "reference_power_w": None},
    # A GPU whose name was not read: the datacenter floor, and the bands (sparkfleet's hosts are Sparks).
    "unknown": {"clock_floor_mhz": None, "floor_fraction_of_max": FLOOR_FRACTION_OF_MAX, "bands": True,
                "healthy_clock_mhz": None, "tflops_reference": None, "reference_power_w": None},
}
_HOPPER_700W = re.compile(r"\bH(?:100|200)\b")
_NOT_700W = re.compile(r"PCIe|NVL", re.IGNORECASE)

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


def gpu_class(name: Optional[str]) -> str:
    """The :data:`GPU_CLASSES` key of a GPU by its name (NVML's / nvidia-smi's ``name``; a torch device string
    such as ``cuda:0 NVIDIA H200`` works too)."""
    if not name:
        return "unknown"
    if "GB10" in name.upper():
        return "gb10"
    if _HOPPER_700W.search(name) and not _NOT_700W.search(name):
        return "hopper-700w"
    return "other"


def _number(name: str, value: Any, low: float = 0.0) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < low:
        raise ValueError("%s: a number >= %g, got %r" % (name, low, value))
    return float(value)


def summarize_samples(samples: Optional[Sequence[Mapping[str, Any]]]) -> Dict[str, Any]:
    """What the probe's samples under load say, each sample ``{"sm_clock_mhz", "power_w", "utilization_pct",
    "reasons"}`` (``reasons``: the active clock-event reason names, None when not read): their count, how many
    carried reasons, each reason's share of those, its longest run of consecutive samples, the median clock and
    utilisation, the mean power."""
    samples = list(samples or [])
    known = 0
    counts: Dict[str, int] = {}
    longest: Dict[str, int] = {}
    current: Dict[str, int] = {}
    for sample in samples:
        reasons = sample.get("reasons")
        if reasons is None:
            current = {}
            continue
        if isinstance(reasons, str) or not all(isinstance(r, str) for r in reasons):
            raise ValueError("samples: reasons must be a list of reason names, got %r" % (reasons,))
        known += 1
        active = set(reasons)
        current = {name: current.get(name, 0) + 1 for name in active}
        for name in active:
            counts[name] = counts.get(name, 0) + 1
            longest[name] = max(longest.get(name, 0), current[name])

    def values(key: str) -> List[float]:
        return [float(s[key]) for s in samples if isinstance(s.get(key), (int, float))
                and not isinstance(s.get(key), bool)]

    clocks, powers, utils = values("sm_clock_mhz"), values("power_w"), values("utilization_pct")
    return {"samples": len(samples), "reason_samples": known,
            "reason_share": {k: round(counts[k] / known, 4) for k in sorted(counts)} if known else {},
            "longest_run": longest,
            "sm_clock_mhz": statistics.median(clocks) if clocks else None,
            "power_mean_w": round(sum(powers) / len(powers), 2) if powers else None,
            "utilization_pct": statistics.median(utils) if utils else None}


def tflops_reference(gpu_name: Optional[str], dtype: Optional[str] = REFERENCE_DTYPE,
                     size: Optional[int] = REFERENCE_MIN_SIZE, power_limit_w: Optional[float] = None
                     ) -> Optional[float]:
    """The class's sustained TFLOP/s reference for the probe's load (rule 5), scaled down by an enforced power
    limit below the reference power; None when the class has none or the load is not the one it holds for."""
    spec = GPU_CLASSES[gpu_class(gpu_name)]
    reference = spec["tflops_reference"]
    if reference is None or dtype != REFERENCE_DTYPE or size is None or size < REFERENCE_MIN_SIZE:
        return None
    ref_power = spec["reference_power_w"]
    if power_limit_w and ref_power and power_limit_w < ref_power:
        return round(reference * power_limit_w / ref_power, 1)
    return float(reference)


def judge(sm_clock_mhz: Optional[Number], power_w: Optional[Number] = None, *,
          expected_sm_clock_mhz: Optional[Number] = None, expected_source: str = "campaign",
          min_fraction: Optional[float] = None,
          degraded_bands: Iterable[Sequence[Number]] = DEFAULT_DEGRADED_BANDS,
          applied_lock_mhz: Optional[Lock] = None, lock_tolerance: float = DEFAULT_LOCK_TOLERANCE,
          min_power_w: Optional[Number] = None, gpu_name: Optional[str] = None,
          max_clock_mhz: Optional[Number] = None, samples: Optional[Sequence[Mapping[str, Any]]] = None,
          utilization_pct: Optional[Number] = None, counter_deltas_us: Optional[Mapping[str, Number]] = None,
          window_s: Optional[Number] = None, power_limit_w: Optional[Number] = None,
          applied_power_limit_w: Optional[Number] = None, tflops: Optional[Number] = None,
          tflops_dtype: Optional[str] = REFERENCE_DTYPE, tflops_size: Optional[int] = REFERENCE_MIN_SIZE,
          peer_tflops: Optional[Sequence[Number]] = None) -> Dict[str, Any]:
    """The probe's verdict for one GPU (the rules of the module docstring).

    ``sm_clock_mhz`` and ``power_w`` are what the probe read under its load (medians of its samples; None: no
    reading; ``sm_clock_mhz`` None with ``samples`` given: their median). ``samples``: per sample under load
    (see :func:`summarize_samples`), for the reasons, the utilisation and the mean power. ``counter_deltas_us``:
    the cumulative clock-event counters' growth over the probe's window of ``window_s`` seconds.
    ``power_limit_w``: the enforced limit the driver reports; ``applied_power_limit_w``: the one sparkfleet set.
    ``applied_lock_mhz``: the clock lock sparkfleet set (``(min, max)`` or one value). ``tflops``: what the
    load delivered, of ``tflops_dtype`` products of ``tflops_size``^2; ``peer_tflops``: the same probe's figures
    on the fleet's other hosts of the same class. ``expected_sm_clock_mhz`` / ``expected_source`` /
    ``min_fraction``: the informational clock ratio (``max_clock``: the expected clock is the maximum, which then
    also serves as ``max_clock_mhz``).

    Returns a JSON-able dict: ``state``, ``reasons``, ``notes``, the figures judged and the yardsticks used.
    Raises ValueError (one line naming the argument) on a bad argument."""
    if expected_source not in EXPECTED_SOURCES:
        raise ValueError("expected_source: one of %s, got %r" % (", ".join(EXPECTED_SOURCES), expected_source))
    if min_fraction is None:
        min_fraction = DEFAULT_MIN_FRACTION if expected_source == "campaign" else DEFAULT_MIN_FRACTION_OF_MAX
    if isinstance(min_fraction, bool) or not isinstance(min_fraction, (int, float)) or not 0 < min_fraction <= 1:
        raise ValueError("min_fraction: a number in (0, 1], got %r" % (min_fraction,))
    if isinstance(lock_tolerance, bool) or not isinstance(lock_tolerance, (int, float)) \
            or not 0 <= lock_tolerance < 1:
        raise ValueError("lock_tolerance: a number in [0, 1), got %r" % (lock_tolerance,))
    if power_w is not None and (isinstance(power_w, bool) or not isinstance(power_w, (int, float))
                                or power_w != power_w or power_w < 0):
        raise ValueError("power_w: a number >= 0, got %r" % (power_w,))
    stats = summarize_samples(samples)
    clock = _positive("sm_clock_mhz", sm_clock_mhz)
    if clock is None and stats["sm_clock_mhz"]:
        clock = float(stats["sm_clock_mhz"])
    expected = _positive("expected_sm_clock_mhz", expected_sm_clock_mhz)
    bands = _bands(degraded_bands)
    lock = _lock_target(applied_lock_mhz)
    floor_w = _positive("min_power_w", min_power_w)
    max_clock = _positive("max_clock_mhz", max_clock_mhz)
    if max_clock is None and expected_source == "max_clock":
        max_clock = expected
    util = _number("utilization_pct", utilization_pct)
    if util is None:
        util = stats["utilization_pct"]
    window = _positive("window_s", window_s)
    enforced = _positive("power_limit_w", power_limit_w)
    applied_w = _positive("applied_power_limit_w", applied_power_limit_w)
    delivered = _number("tflops", tflops)
    peers = [_number("peer_tflops", p) for p in (peer_tflops or [])]
    counters: Optional[Dict[str, float]] = None
    if counter_deltas_us is not None:
        counters = {str(k): _number("counter_deltas_us.%s" % k, v) for k, v in counter_deltas_us.items()
                    if v is not None}
    mean_power = stats["power_mean_w"] if stats["power_mean_w"] is not None else (
        None if power_w is None else float(power_w))
    cls = gpu_class(gpu_name)
    spec = GPU_CLASSES[cls]

    failed: List[Dict[str, str]] = []
    invalid: List[Dict[str, str]] = []
    unknown: List[Dict[str, str]] = []
    notes: List[Dict[str, str]] = []
    judged = False  # whether any rule had what it needs
    share = stats["reason_share"] if stats["reason_samples"] else None
    n_reasons = stats["reason_samples"]

    # 1. the load did not run
    if util is not None and util < MIN_UTILIZATION_PCT:
        invalid.append(_reason("load_not_running", "GPU utilisation under the probe's load %.0f%% (median) is "
                               "below %.0f%%: the load did not run" % (util, MIN_UTILIZATION_PCT)))
    if share is not None and share.get(GPU_IDLE, 0.0) > DOMINANT_SHARE:
        invalid.append(_reason("gpu_idle", "GPU_IDLE active in %.0f%% of %d samples: the load did not run"
                               % (100 * share[GPU_IDLE], n_reasons)))

    # 2. faults: DCGM's 0xE8 reasons
    window_us = None if window is None else window * 1e6
    fault_us = None
    grew = {n: counters[n] for n in FAULT_COUNTERS if n in counters} if counters is not None else {}
    counted = bool(grew) and window_us is not None
    if counted and window_us is not None:
        judged = True
        fault_us = sum(grew.values())
        if fault_us > FAULT_WINDOW_FRACTION * window_us:
            failed.append(_reason("thermal_or_power_brake", "clock-event counters grew by %s over the probe's %.1f s "
                                  "window (%.1f%%; more than %.0f%% is a fault: DCGM's 0xE8 set)"
                                  % (", ".join("%s %.0f ms" % (n, v / 1000) for n, v in grew.items() if v),
                                     window, 100 * fault_us / window_us, 100 * FAULT_WINDOW_FRACTION)))
    if share is not None:
        judged = True
        for name in FAULT_REASONS:
            if name != HW_SLOWDOWN and counted:
                continue  # the counter decides (more precise than samples)
            run = stats["longest_run"].get(name, 0)
            if run >= SUSTAINED_SAMPLES:
                failed.append(_reason("hw_slowdown" if name == HW_SLOWDOWN else "thermal_or_power_brake",
                                      "%s active in %d consecutive samples under load (%d or more is a fault: "
                                      "DCGM's 0xE8 set)" % (name.upper(), run, SUSTAINED_SAMPLES)))
    elif not counted:
        notes.append(_reason("no_clock_event_reasons", "no clock-event reasons or counters were read: thermal and "
                             "power-brake faults not judged"))

    limit, limit_source = (enforced, "enforced") if enforced is not None else (
        (applied_w, "applied") if applied_w is not None else (None, None))
    power_limited = False
    floor = spec["clock_floor_mhz"] if spec["clock_floor_mhz"] is not None else (
        None if max_clock is None else round(spec["floor_fraction_of_max"] * max_clock, 1))
    used_bands = bands if spec["bands"] else []
    reference = floor_t = peer_median = None
    effective = None if expected is None else (min(expected, lock) if lock is not None else expected)
    fraction = None

    if not invalid:
        # 3. power-limited and healthy
        if applied_w is not None and enforced is not None and abs(enforced - applied_w) > max(1.0, 0.01 * applied_w):
            notes.append(_reason("power_limit_not_applied", "the power limit sparkfleet applied (%.0f W) is not the "
                                 "enforced one (%.0f W)" % (applied_w, enforced)))
        cap_share = None if share is None else share.get(SW_POWER_CAP, 0.0)
        cap_counter = counters.get(POWER_CAP_COUNTER) if counters is not None else None
        dominant = (cap_share is not None and cap_share >= DOMINANT_SHARE) or (
            cap_counter is not None and window_us is not None and cap_counter >= DOMINANT_SHARE * window_us)
        power_limited = bool(dominant and limit and mean_power is not None
                             and mean_power >= POWER_LIMITED_FRACTION * limit)
        judged = judged or power_limited

        # 4. degraded: the class floor and the degraded bands (not judged when power-limited)
        if clock is None:
            if not power_limited:
                unknown.append(_reason("missing_reading", "no SM clock reading under load"))
        elif not power_limited:
            for low, high in used_bands:  # a band alone does not make a clock judged: outside it says little
                if lock is not None and lock <= high:
                    continue  # sparkfleet locked the clock at or below this band itself
                if low <= clock <= high:
                    failed.append(_reason("degraded_band", "SM clock under load %.0f MHz is in the known degraded "
                                                           "band %.0f-%.0f MHz" % (clock, low, high)))
            if floor is not None:
                judged = True
                if not any(r["cause"] == "degraded_band" for r in failed) and clock < floor \
                        and not (lock is not None and lock <= floor):
                    source = "the %s floor" % cls if spec["clock_floor_mhz"] is not None else \
                        "%.0f%% of the maximum %.0f MHz" % (100 * spec["floor_fraction_of_max"], max_clock or 0)
                    failed.append(_reason("below_class_floor", "SM clock under load %.0f MHz is below %.0f MHz (%s), "
                                                               "and the GPU is not power-limited"
                                          % (clock, floor, source)))
        if clock is not None and lock is not None:
            judged = True  # the clock against the lock sparkfleet applied
            slack = lock * lock_tolerance
            expect = min(lock, spec["healthy_clock_mhz"]) if spec["healthy_clock_mhz"] else lock
            if clock > lock + slack:
                failed.append(_reason("lost_cap", "SM clock under load %.0f MHz exceeds the applied lock %.0f MHz "
                                                  "by more than %.0f MHz: the cap is no longer in force"
                                      % (clock, lock, slack)))
            elif not power_limited and clock < LOCK_NOTE_FRACTION * expect:
                notes.append(_reason("below_lock", "SM clock under load %.0f MHz is below %.0f%% of %.0f MHz, what "
                                                   "the applied lock %.0f MHz leads to expect"
                                     % (clock, 100 * LOCK_NOTE_FRACTION, expect, lock)))
        # the clock against the expected clock: a note, never a fault
        if clock is not None and effective is not None:
            fraction = clock / effective
            if fraction < min_fraction:
                source = "applied lock" if lock is not None and expected is not None and lock < expected \
                    else expected_source
                notes.append(_reason("below_fraction", "SM clock under load %.0f MHz is %.0f%% of the expected "
                                                       "%.0f MHz (%s; %.0f%% noted%s)"
                                     % (clock, 100 * fraction, effective, source, 100 * min_fraction,
                                        ", power-limited" if power_limited else "")))

        # 5. delivered throughput
        reference = tflops_reference(gpu_name, tflops_dtype, tflops_size, limit)
        if reference is not None:
            floor_t = round(TFLOPS_FLOOR_FRACTION * reference, 1)
        if delivered is not None and floor_t is not None:
            judged = True
            if delivered < floor_t:
                scaled = " at the %.0f W limit" % limit if limit and reference != spec["tflops_reference"] else ""
                failed.append(_reason("low_tflops", "the probe's load delivered %.1f TFLOP/s, below %.1f (%.0f%% of "
                                                    "the %s reference %.0f TFLOP/s%s)"
                                      % (delivered, floor_t, 100 * TFLOPS_FLOOR_FRACTION, cls, reference, scaled)))
        if delivered is not None and peers:
            peer_median = round(statistics.median(peers), 3)
            if delivered < PEER_MIN_FRACTION * peer_median:
                notes.append(_reason("below_peers", "the probe's load delivered %.1f TFLOP/s, %.0f%% of its peers' "
                                                    "median %.1f (below %.0f%% warns)"
                                     % (delivered, 100 * delivered / peer_median, peer_median,
                                        100 * PEER_MIN_FRACTION)))
    if floor_w is not None:
        if power_w is None:
            unknown.append(_reason("missing_reading", "no power reading under load (minimum %.0f W set)" % floor_w))
        elif power_w < floor_w:
            failed.append(_reason("low_power", "power under load %.1f W is below the minimum %.0f W"
                                  % (power_w, floor_w)))
    if not invalid and clock is not None and not judged:
        unknown.append(_reason("no_clock_floor", "nothing to judge SM clock %.0f MHz by: no class floor or maximum "
                                                 "clock, no clock-event reasons or counters, no throughput reference"
                               % clock))

    state = "suspect" if failed else ("invalid" if invalid else ("unknown" if unknown else "healthy"))
    return {
        "state": state,
        "reasons": failed + invalid + unknown,
        "notes": notes,
        "sm_clock_mhz": clock,
        "power_w": None if power_w is None else float(power_w),
        "power_mean_w": mean_power,
        "utilization_pct": util,
        "gpu_name": gpu_name,
        "gpu_class": cls,
        "max_clock_mhz": max_clock,
        "clock_floor_mhz": floor,
        "degraded_bands": [list(b) for b in used_bands],
        "active_reasons": sorted(share) if share is not None else None,
        "reason_share": share,
        "counter_deltas_us": counters,
        "window_s": window,
        "fault_counter_us": fault_us,
        "power_limit_w": limit,
        "power_limit_source": limit_source,
        "power_limited": power_limited,
        "tflops": delivered,
        "tflops_reference": reference,
        "tflops_floor": floor_t,
        "peer_tflops_median": peer_median,
        "expected_sm_clock_mhz": expected,
        "expected_source": expected_source,
        "min_fraction": float(min_fraction),
        "effective_expected_mhz": effective,
        "applied_lock_mhz": lock,
        "fraction": fraction,
    }


def compare_to_peers(tflops_by_host: Mapping[str, Optional[Number]],
                     min_fraction: float = PEER_MIN_FRACTION) -> Dict[str, Dict[str, Any]]:
    """Rule 5 against the fleet, for the controller: per host with a figure, ``{"tflops", "peer_median",
    "fraction", "warn", "message"}``, its TFLOP/s against the median of the OTHER hosts' (the same probe on the
    same class of GPU: the caller groups them), ``warn`` below ``min_fraction`` (0.9) of it. A host without peers
    gets ``peer_median`` None and no warning. Pure."""
    if isinstance(min_fraction, bool) or not isinstance(min_fraction, (int, float)) or not 0 < min_fraction <= 1:
        raise ValueError("min_fraction: a number in (0, 1], got %r" % (min_fraction,))
    figures = {str(h): _number("tflops_by_host.%s" % h, v) for h, v in tflops_by_host.items()}
    figures = {h: v for h, v in figures.items() if v is not None}
    out: Dict[str, Dict[str, Any]] = {}
    for host, value in sorted(figures.items()):
        others = [v for h, v in figures.items() if h != host]
        median = statistics.median(others) if others else None
        fraction = None if not median else value / median
        warn = fraction is not None and fraction < min_fraction
        out[host] = {"tflops": value, "peer_median": median, "fraction": None if fraction is None
                     else round(fraction, 4), "warn": warn,
                     "message": ("%s: the readiness probe delivered %.1f TFLOP/s, %.0f%% of its peers' median %.1f"
                                 % (host, value, 100 * fraction, median)) if warn and fraction is not None else None}
    return out


def action(verdict: Mapping[str, Any], policy: str = "mark", refuse_unknown: bool = False) -> Dict[str, Any]:
    """What to do with the run: ``{"action": "run" | "mark" | "refuse", "warn": bool, "state", "reasons"}``.

    healthy -> run; suspect -> ``mark`` (run, result marked ``suspect``, warn) or ``refuse`` per ``policy``;
    unknown and invalid (the load did not run: nothing was measured under load) -> mark and warn (``refuse``
    only with ``refuse_unknown`` under the ``refuse`` policy: a host whose sensor gives nothing is not silently
    averaged in, nor blocked by default)."""
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
