# Copyright: sparkfleet contributors
# Apache-2.0
"""Cooldown before a benchmark run: wait until the GPUs are cool and their temperature has settled.

The one implementation of the rule behind the ``thermal_wait`` module, shared with the run executor:

* :func:`validate_cooldown_options` checks the options and returns problems that name the option;
* :func:`wait_for_cooldown` polls an open :class:`~sparkfleet_gpu.GpuSensor` until the stop rule holds
  (or ``max_wait``) and returns the result dict that ``thermal_wait`` returns.

Stop rule (see the module's documentation): a GPU is *cool* at or below ``threshold``; it is *settled* when
its readings span the last ``settle_window`` seconds and their least-squares trend changes the temperature by
at most ``settle_band`` across that window. From ``min_wait`` on, the wait ends at the first poll where every
GPU is settled (and cool, with ``require_cool``). Polls lie on a fixed grid from the start; the loop wakes
exactly at ``min_wait`` and ``max_wait``.

Stdlib only; the clock and the sleep are parameters, so that tests replay traces on a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..contract.fields import DAY_S, GPU_TEMP_C, Field, field_problem, number_text
from ..sensors.gpu import GpuSensor, GpuSensorError

_EPS = 1e-9

# -------------------------------------------------------------------------------------------- cooldown

#: The cooldown before each run (campaign ``cooldown``; ``thermal_wait``'s options are the ``option`` names).
COOLDOWN_FIELDS = (
    Field("enabled", "bool", True, "Wait for the GPU before each run at all."),
    Field("threshold_c", "float", 45, "A GPU is cool at or below this temperature.", "C",
          GPU_TEMP_C[0], GPU_TEMP_C[1], option="threshold"),
    Field("settle_band_c", "float", 1.0, "Largest change of the fitted temperature trend across the settle "
          "window for a GPU to count as settled.", "C", 0.0, 50.0, option="settle_band"),
    Field("settle_window_s", "float", 30, "Window the temperature trend is fitted over (0: settle criterion "
          "off); at most max_wait_s.", "s", 0.0, DAY_S, option="settle_window"),
    Field("min_wait_s", "float", 0, "Wait at least this long, even when settled earlier; at most max_wait_s.",
          "s", 0.0, DAY_S, option="min_wait"),
    Field("max_wait_s", "float", 900, "Longest wait; then the run starts anyway (on_timeout continue).", "s",
          0.0, DAY_S, option="max_wait"),
    Field("poll_interval_s", "float", 2, "Seconds between temperature readings.", "s", 0.0, 3600.0,
          low_open=True, option="poll_interval"),
    Field("on_timeout", "str", "continue", "What reaching max_wait_s does: continue (start the run) or fail.",
          choices=("continue", "fail"), option="on_timeout"),
)
COOLDOWN_BY_NAME = {f.name: f for f in COOLDOWN_FIELDS}
COOLDOWN_BY_OPTION = {f.option: f for f in COOLDOWN_FIELDS if f.option}


def cooldown_problems(values: Mapping[str, Any], where: str = "", by: str = "name") -> list[str]:
    """Problems with a cooldown, each naming its field; ``values`` keyed by campaign name (``by='name'``)
    or by ``thermal_wait`` option (``by='option'``). Missing keys take the defaults; unknown keys are left to
    the caller. The cross-field rules: min_wait and settle_window at most max_wait."""
    table = COOLDOWN_BY_NAME if by == "name" else COOLDOWN_BY_OPTION
    prefix = where + "." if where else ""
    problems = []
    good = {}
    for key, f in table.items():
        value = values.get(key, f.default)
        if value is None and by == "option":  # an Ansible option left unset
            value = f.default
        problem = field_problem(f, value)
        if problem:
            problems.append("%s%s: %s" % (prefix, key, problem))
        else:
            good[f.name] = value
    key = (lambda name: name) if by == "name" else (lambda name: COOLDOWN_BY_NAME[name].option)
    for name, why in (("min_wait_s", ""), ("settle_window_s", ": the GPUs could never settle in time")):
        if {name, "max_wait_s"} <= set(good) and good[name] > good["max_wait_s"]:
            problems.append("%s%s: %s is above %s %s%s" % (prefix, key(name), number_text(good[name]),
                                                         key("max_wait_s"), number_text(good["max_wait_s"]), why))
    return problems


class Cooldown(object):
    """The one cooldown type: the campaign's ``cooldown`` and the arguments of ``thermal.wait_for_cooldown``."""

    __slots__ = tuple(f.name for f in COOLDOWN_FIELDS)

    def __init__(self, **values: Any) -> None:
        for f in COOLDOWN_FIELDS:
            setattr(self, f.name, values.get(f.name, f.default))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None, where: str = "cooldown") -> "Cooldown":
        """A checked Cooldown from campaign-named keys; ValueError naming every bad field."""
        values = dict(values or {})
        problems = ["%s.%s: unknown key (known: %s)" % (where, k, ", ".join(sorted(COOLDOWN_BY_NAME)))
                    for k in values if k not in COOLDOWN_BY_NAME]
        problems += cooldown_problems(values, where)
        if problems:
            raise ValueError("; ".join(problems))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in COOLDOWN_FIELDS}

    def wait_kwargs(self) -> dict[str, float]:
        """Keyword arguments of ``thermal.wait_for_cooldown`` (its option names)."""
        return {f.option: float(getattr(self, f.name)) for f in COOLDOWN_FIELDS
                if f.option and f.kind == "float"}


#: Option defaults of the thermal_wait module: the cooldown fields, by option name.
COOLDOWN_DEFAULTS: dict[str, Any] = {
    **{f.option: f.default for f in COOLDOWN_FIELDS if f.option and f.kind == "float"},
    "on_timeout": COOLDOWN_BY_OPTION["on_timeout"].default,
    "gpus": None,
    "require_cool": False,
}


class CooldownError(GpuSensorError):
    """The wait could not go on (the sensor failed, a GPU reports no temperature).

    ``result`` holds what was known when it failed (sensor, threshold, and the readings once there are any),
    so that a caller can still report it.
    """

    def __init__(self, msg: str, result: dict[str, Any]) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


def validate_cooldown_options(params: Mapping[str, Any]) -> list[str]:
    """Problems with the cooldown options (thermal_wait's names), each naming its option; ``[]`` when fine.

    The rules are the campaign's (:func:`cooldown_problems`): types, physical ranges, no NaN or
    infinity, min_wait and settle_window at most max_wait. Missing keys take the defaults; keys this function
    does not know are ignored.
    """
    problems = cooldown_problems({k: v for k, v in params.items() if k in COOLDOWN_BY_OPTION}, by="option")
    gpus = params.get("gpus")
    if gpus is not None:
        if isinstance(gpus, (str, bytes)) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            problems.append(f"gpus must be a list of GPU indices, got {gpus!r}")
        elif not gpus:
            problems.append("gpus must not be empty; omit it to wait for all GPUs")
        else:
            negative = [g for g in gpus if g < 0]
            if negative:
                problems.append(f"gpus must be GPU indices (0 or more), got {negative}")
    return problems


def fitted_drift(points: Sequence[tuple[float, float]], window: float) -> float | None:
    """Least-squares slope of ``points`` (t, temp) times ``window``; None with fewer than two distinct t."""
    n = len(points)
    if n < 2:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t <= _EPS:
        return None
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return cov / var_t * window


def window_points(
    times: Sequence[float], temps: Sequence[float], now: float, window: float
) -> list[tuple[float, float]] | None:
    """Readings of the last ``window`` seconds, anchored at the last one at or before ``now - window``.

    None while the readings do not yet reach back that far.
    """
    start = now - window
    anchor = None
    for i, t in enumerate(times):
        if t <= start + _EPS:
            anchor = i
        else:
            break
    if anchor is None:
        return None
    return list(zip(times[anchor:], temps[anchor:]))  # noqa: B905 (same length by construction)


def gpu_drift(times: Sequence[float], temps: Sequence[float], now: float, window: float) -> float | None:
    """Fitted drift of one GPU over the window; 0 with the settle criterion off, None until it spans it."""
    if window <= 0:
        return 0.0
    points = window_points(times, temps, now, window)
    return None if points is None else fitted_drift(points, window)


def _names(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def wait_for_cooldown(
    sensor: GpuSensor,
    *,
    threshold: float = COOLDOWN_DEFAULTS["threshold"],
    settle_band: float = COOLDOWN_DEFAULTS["settle_band"],
    settle_window: float = COOLDOWN_DEFAULTS["settle_window"],
    min_wait: float = COOLDOWN_DEFAULTS["min_wait"],
    max_wait: float = COOLDOWN_DEFAULTS["max_wait"],
    poll_interval: float = COOLDOWN_DEFAULTS["poll_interval"],
    gpus: Sequence[int] | None = None,
    require_cool: bool = False,
    check_mode: bool = False,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll ``sensor`` until every selected GPU has settled (see the module docstring); return the result.

    Keys: reason (cool_and_settled | settled | max_wait | check_mode), timed_out, waited, polls, start_temp,
    end_temp, start_temps, end_temps, cool, settled, drift, trace, msg, gpus, sensor, threshold. With
    ``check_mode`` one reading is taken and returned without waiting. Reaching ``max_wait`` is a result
    (``timed_out=True``), not an exception: whether it fails is the caller's call. Raises
    :class:`CooldownError` (with the partial result) when the sensor fails or a GPU reports no temperature,
    and ``ValueError`` for options :func:`validate_cooldown_options` rejects. Does not close the sensor.
    """
    problems = validate_cooldown_options(
        dict(
            threshold=threshold, settle_band=settle_band, settle_window=settle_window, min_wait=min_wait,
            max_wait=max_wait, poll_interval=poll_interval, gpus=None if gpus is None else list(gpus),
        )
    )
    if problems:
        raise ValueError("; ".join(problems))
    threshold = float(threshold)
    gpu_ids: list[int] | None = list(dict.fromkeys(gpus)) if gpus is not None else None
    indices: list[int] = []
    temps: list[list[float]] = []
    times: list[float] = []
    trace: list[list[float | None]] = []
    result: dict[str, Any] = dict(sensor=sensor.kind, threshold=threshold)
    start = monotonic()

    def read() -> float:
        t = monotonic() - start
        try:
            readings = sensor.read(gpu_ids)
        except GpuSensorError as exc:
            raise CooldownError(f"cannot read GPU temperature: {exc}", result) from exc
        if not indices:
            indices.extend(r.index for r in readings)
            temps.extend([] for _ in readings)
            result["gpus"] = list(indices)
        for series, r in zip(temps, readings):  # noqa: B905 (the sensor returns the GPUs asked for)
            if r.temperature_c is None:
                raise CooldownError(f"GPU {r.index} reports no temperature", result)
            series.append(float(r.temperature_c))
        times.append(t)
        trace.append([round(t, 1), *(series[-1] for series in temps)])
        return t

    def summary(reason: str, settled: bool, drifts: list[float | None]) -> dict[str, Any]:
        start_temps = [series[0] for series in temps]
        end_temps = [series[-1] for series in temps]
        result.update(
            reason=reason,
            timed_out=reason == "max_wait",
            waited=round(times[-1] - times[0], 1),
            polls=len(times),
            start_temp=max(start_temps),
            end_temp=max(end_temps),
            start_temps=start_temps,
            end_temps=end_temps,
            cool=all(t <= threshold for t in end_temps),
            settled=settled,
            drift=[None if d is None else round(d, 2) for d in drifts],
            trace=trace,
        )
        return result

    if check_mode:
        read()
        res = summary("check_mode", False, [None] * len(temps))
        res["msg"] = f"check mode: GPU temperature {res['end_temp']:g} C, not waited"
        return res

    deadline = start + max_wait
    earliest = start + min_wait
    while True:
        t = read()
        drifts = [gpu_drift(times, series, t, settle_window) for series in temps]
        settled = all(d is not None and abs(d) <= settle_band + _EPS for d in drifts)
        cool = all(series[-1] <= threshold for series in temps)
        if settled and t >= min_wait - _EPS and (cool or not require_cool):
            res = summary("cool_and_settled" if cool else "settled", True, drifts)
            where = "cool and settled" if cool else f"settled above {threshold:g} C"
            res["msg"] = f"GPU {_names(res['gpus'])} {where} at {res['end_temp']:g} C after {res['waited']:g} s"
            return res
        now = monotonic()
        if now >= deadline - _EPS:
            res = summary("max_wait", settled, drifts)
            res["msg"] = (
                f"GPU {_names(res['gpus'])} not {'cool and ' if require_cool else ''}settled after "
                f"{max_wait:g} s (now {res['end_temp']:g} C)"
            )
            return res
        # Poll on a fixed grid from the start, so slow reads do not stretch the interval; wake exactly at
        # min_wait and max_wait so that neither is overshot by up to a poll interval.
        next_poll = start + len(times) * poll_interval
        wake = min(next_poll, deadline, earliest if now < earliest else next_poll)
        sleep(max(0.0, wake - now))
