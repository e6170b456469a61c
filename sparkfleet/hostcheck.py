"""The host-state evidence behind "is this host normal?", read from a results tree (issue 24).

The hosts write, besides the run records the loader reads:

* per run, the record's ``readiness`` section (the probe before the run: ``state`` healthy | suspect |
  unknown, ``reasons`` [{cause, message}], ``sm_clock_mhz`` and ``power_w`` reached under load,
  ``expected_clock_mhz``) and its ``attestation`` section (``counters``: throttle/event counters as deltas over
  the run, ``memory_start``: MemFree/MemAvailable/Cached and ``free_huge_blocks`` at start, ``energy``:
  ``{energy_j, j_per_output_token, scope, steady, startup, ...}``: the steady split worked out from the run's
  telemetry.csv where a record predates it);
* per host, ``<host>/attestation.json`` (kernel, driver, CUDA, VBIOS, firmware, image digest:
  sparkfleet_host/health/attestation.py) and ``<host>/bandwidth.json`` (``{bandwidth_bytes_s, method,
  ...}``, or ``{bandwidth_bytes_s: null, error}`` where it could not be measured).

This module reads them (the loader makes columns of the readiness state and reasons only, which every statistic
reads to leave suspect runs out: each record is read again here, and only records that carry a section are parsed;
a multi-node run's state and reasons are the loader's, its workers folded in, with_node_readiness), works out each
decode figure's share of the memory-bandwidth roofline (sparkfleet.roofline), and reads a reference of published
figures (:func:`load_reference`). The judgement is sparkfleet.report.host_normal's. A tree without any of these
files and sections gives empty results.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.textfile import read_json_object
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import modelcard
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import (
    attestation as host_attestation,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import host_state
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import parse_log
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from sparkfleet import roofline, serving
from sparkfleet.load import WORKERS_STATE, readiness_reasons, record_from_bytes
from sparkfleet.stats import READINESS_REASONS, READINESS_STATE, SUSPECT

ATTESTATION_FILE = "attestation.json"
BANDWIDTH_FILE = "bandwidth.json"
#: Where the acknowledgement of host differences is read from campaign.json (top level or the resolved campaign):
#: the campaign plan's copy of ``sparkfleet_acknowledge_host_differences``.
ACKNOWLEDGE_KEY = "acknowledge_host_differences"

#: A record that carries one of the sections this module reads (a cheap test before parsing the JSON).
_SECTIONS = re.compile(rb'"(readiness|attestation|serving)"\s*:\s*[{]')

#: Per-run state columns (:func:`run_states`).
STATE_COLUMNS = ["run_id", "host", "readiness_state", "readiness_reasons", "readiness_causes", "clock_mhz",
                 "expected_clock_mhz", "power_w", "throttle_grew", "free_huge_blocks", "energy_j",
                 "j_per_output_token", "energy_scope", "serving_c1_tok_s", "j_per_output_token_steady",
                 "steady_power_w", "startup_energy_j", "steady_source", "steady_error", "serving_c1_points",
                 "power_limited", "tflops", "power_limit_w", "own_readiness_state"]

#: Energy scope labels: what the sampled power covers (GB10's NVML reads the GPU rail, about half the system).
SCOPE_WORDS = {"gpu_rail": "GPU rail only", "gpu": "GPU only", "system": "whole system"}


def host_dirs(root: Path, runs: pd.DataFrame) -> dict[str, Path]:
    """Each host's directory: the one above the ``runs`` directory of its records (``<host>/runs/<run_id>``)."""
    dirs: dict[str, Path] = {}
    if runs.empty or "record_dir" not in runs:
        return dirs
    for host, record_dir in runs[["host", "record_dir"]].drop_duplicates("host").itertuples(index=False):
        parts = Path(str(record_dir)).parts
        if len(parts) >= 2 and parts[-2] == "runs":
            dirs[str(host)] = Path(root, *parts[:-2])
    return dirs


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# --- per host: attestation.json, bandwidth.json, the acknowledgement ----------------------------------------

def attestations(dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """host -> its attestation.json (hosts without one left out)."""
    out = {}
    for host, directory in sorted(dirs.items()):
        data = read_json_object(directory / ATTESTATION_FILE)
        if isinstance(data, dict):
            out[host] = data
    return out


def bandwidths(dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """host -> ``{bytes_per_s (None where not measured), method, reason}`` from its bandwidth.json."""
    out = {}
    for host, directory in sorted(dirs.items()):
        data = read_json_object(directory / BANDWIDTH_FILE)
        if data is None and not (directory / BANDWIDTH_FILE).exists():
            continue
        data = data if isinstance(data, dict) else {"reason": f"{BANDWIDTH_FILE} is not a JSON object"}
        # gpu_probe.py bandwidth's own keys, as host_attest writes them: bandwidth_bytes_s, method, error
        value = _number(data.get("bandwidth_bytes_s"))
        out[host] = {"bytes_per_s": value if value and value > 0 else None, "method": data.get("method"),
                     "reason": data.get("error") or data.get("reason") or (None if value else "no bandwidth_bytes_s")}
    return out


def identity_differences(atts: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]],
                                                                    dict[str, dict[str, Any]]]:
    """(every identity field read on two or more hosts with values not all the same, the firmware/driver part of
    it that blocks a reproducibility comparison): attestation.differences and blocking_differences. A field a host
    could not read (fwupd missing, null, an error marker) is never a difference (attestation.unread names it).
    Empty below two hosts."""
    if len(atts) < 2:
        return {}, {}
    diff = host_attestation.differences(atts)
    return diff, host_attestation.blocking_differences(diff)


def acknowledged_in(root: Path) -> bool:
    """Whether the campaign's plan acknowledged host differences: campaign.json's ``acknowledge_host_differences``
    (top level, or in ``resolved``) is true. Under a tree of campaigns, every campaign.json found one level down
    must say so."""
    plans = [root / "campaign.json"] if (root / "campaign.json").is_file() else sorted(root.glob("*/campaign.json"))
    if not plans:
        return False
    for plan in plans:
        data = read_json_object(plan)
        if not isinstance(data, dict):
            return False
        resolved = data.get("resolved") if isinstance(data.get("resolved"), dict) else {}
        if data.get(ACKNOWLEDGE_KEY) is not True and resolved.get(ACKNOWLEDGE_KEY) is not True:
            return False
    return True


# --- per run: the readiness and attestation sections --------------------------------------------------------

def _throttle_grew(counters: Any) -> str:
    """The counters that grew over the run, "reason +N" joined ("" when none did); ``counters`` is
    attestation.counter_deltas' dict ({"deltas": {...}}) or a plain {reason: delta}."""
    if not isinstance(counters, dict):
        return ""
    deltas = counters.get("deltas") if isinstance(counters.get("deltas"), dict) else counters
    grew = []
    for reason, delta in sorted(deltas.items()):
        if isinstance(delta, dict):  # per GPU: {bus_id: {reason: delta}} or {bus_id: {"deltas": ...}}
            inner = _throttle_grew(delta)
            grew += [inner] if inner else []
            continue
        value = _number(delta)
        if value and value > 0 and reason not in ("gpu_idle", "idle", "applications_clocks_setting"):
            grew.append(f"{reason} +{value:g}")
    return ", ".join(grew)


def _serving_c1(serving: Any) -> float | None:
    """The serving run's decode rate per request at concurrency 1 (``tg_req_tok_s`` of its points with
    ``concurrency`` 1; their mean), where the serving section has such points."""
    points = serving.get("points") if isinstance(serving, dict) else None
    values = []
    for point in points if isinstance(points, list) else []:
        if not isinstance(point, dict) or _number(point.get("concurrency")) != 1 or point.get("status", "ok") != "ok":
            continue  # a failed point's figures never count (the serving report's rule)
        metrics = point.get("metrics") if isinstance(point.get("metrics"), dict) else point
        value = _number(metrics.get("tg_req_tok_s"))
        if value is not None:
            values.append(value)
    return sum(values) / len(values) if values else None


def _left_out_points(record: dict[str, Any]) -> set[Any]:
    """The points of a serving record whose per-user decode figure serving.impossible_samples leaves out."""
    if not serving.has_points(record):
        return set()
    found = serving.impossible_samples(serving.points_frame(serving.point_rows(record, "")))
    return set(found.loc[found["left_out"] == "tg_req_tok_s", "point"])


def _serving_c1_points(section: Any, left_out: set[Any] = frozenset()) -> list[dict[str, Any]]:
    """The serving decode rate per request at concurrency 1 for each (depth, pp, tg) of the run's ok points, in
    profile order: ``[{depth, pp, tg, tok_s}]`` (the mean over points of one profile, should a record repeat one).
    Decode slows as the context grows (the KV cache read per token), so depths are never averaged together.
    ``left_out``: points whose figure cannot be (serving.impossible_samples), not read."""
    points = section.get("points") if isinstance(section, dict) else None
    values: dict[tuple[int, int, int], list[float]] = {}
    for point in points if isinstance(points, list) else []:
        if not isinstance(point, dict) or _number(point.get("concurrency")) != 1 or point.get("status", "ok") != "ok" \
                or point.get("point") in left_out:
            continue
        profile = tuple(_number(point.get(k)) for k in ("depth", "pp", "tg"))
        metrics = point.get("metrics") if isinstance(point.get("metrics"), dict) else point
        value = _number(metrics.get("tg_req_tok_s"))
        if value is not None and value >= 0 and all(v is not None for v in profile):
            values.setdefault(tuple(int(v) for v in profile), []).append(value)  # type: ignore[arg-type]
    return [{"depth": d, "pp": pp, "tg": tg, "tok_s": sum(v) / len(v)} for (d, pp, tg), v in sorted(values.items())]


def _steady_energy(record: dict[str, Any], energy: dict[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """The run's energy over the load's steady window and its start-up: the record's own (energy.steady and
    energy.startup, written since issue 32), else worked out now from the run's telemetry.csv the same way
    (host_state.energy_split), for records written before. Keys: j_per_output_token_steady, steady_power_w,
    startup_energy_j, steady_source, steady_error."""
    steady, startup, source = energy.get("steady"), energy.get("startup"), "steady window from the record"
    if not isinstance(steady, dict) and run_dir is not None and (run_dir / "telemetry.csv").is_file():
        section = record.get("serving") if isinstance(record.get("serving"), dict) else None
        tokens = _number(energy.get("output_tokens"))
        server = section.get("server") if section and isinstance(section.get("server"), dict) else {}
        split = host_state.energy_split(str(run_dir / "telemetry.csv"),
                                        host_state.output_rate(record.get("metrics"), section, tokens),
                                        _number(server.get("ready_s")))
        steady, startup, source = split["steady"], split["startup"], "steady window recomputed from telemetry.csv"
    if not isinstance(steady, dict):
        return {"j_per_output_token_steady": None, "steady_power_w": None, "startup_energy_j": None,
                "steady_source": None, "steady_error": None}
    startup = startup if isinstance(startup, dict) else {}
    return {"j_per_output_token_steady": _number(steady.get("j_per_output_token")),
            "steady_power_w": _number(steady.get("power_w")), "startup_energy_j": _number(startup.get("energy_j")),
            "steady_source": source, "steady_error": steady.get("error") if isinstance(steady.get("error"), str)
            else None}


def state_of(record: dict[str, Any], run_dir: Path | None = None) -> dict[str, Any]:
    """One run's row of :data:`STATE_COLUMNS` from its record (None where a section or key is absent); ``run_dir``:
    the run's directory, whose telemetry.csv gives the steady energy of a record written without it."""
    ready = record.get("readiness") if isinstance(record.get("readiness"), dict) else {}
    att = record.get("attestation") if isinstance(record.get("attestation"), dict) else {}
    reasons = [r for r in ready.get("reasons") or [] if isinstance(r, dict)]
    memory = att.get("memory_start") if isinstance(att.get("memory_start"), dict) else {}
    energy = att.get("energy") if isinstance(att.get("energy"), dict) else {}
    huge = _number(memory.get("free_huge_blocks"))
    return {
        "run_id": record.get("run_id"), "host": record.get("host"),
        "readiness_state": ready.get("state") if isinstance(ready.get("state"), str) else None,
        "readiness_reasons": readiness_reasons(ready),
        "readiness_causes": ",".join(sorted({str(r.get("cause")) for r in reasons})) or None,
        "clock_mhz": _number(ready.get("sm_clock_mhz")),
        "expected_clock_mhz": _number(ready.get("expected_clock_mhz")),
        "power_w": _number(ready.get("power_w")),
        "throttle_grew": _throttle_grew(att.get("counters")) or None,
        "free_huge_blocks": huge,
        # host_state.energy writes energy_j (records before it: joules)
        "energy_j": _number(energy.get("energy_j", energy.get("joules"))),
        "j_per_output_token": _number(energy.get("j_per_output_token")),
        "energy_scope": energy.get("scope") if isinstance(energy.get("scope"), str) else None,
        "serving_c1_tok_s": _serving_c1(record.get("serving")),
        **(_steady_energy(record, energy, run_dir) if energy else _steady_energy(record, {}, None)),
        "serving_c1_points": _serving_c1_points(record.get("serving"), _left_out_points(record)) or None,
        # the probe's judgement (readiness.judge): a power-limited clock is healthy and not a cause
        "power_limited": ready.get("power_limited") if isinstance(ready.get("power_limited"), bool) else None,
        "tflops": _number(ready.get("tflops")),
        "power_limit_w": _number(ready.get("power_limit_w")),
        # the run's own probe, apart from its nodes' (with_node_readiness): what a host's readiness line counts
        "own_readiness_state": ready.get("state") if isinstance(ready.get("state"), str) else None,
    }


def _record(root: Path, record_dir: str, only_with_sections: bool) -> dict[str, Any] | None:
    """The run's record as every reader takes it (load.record_from_bytes); None where it is missing or unusable,
    or (``only_with_sections``) carries none of the sections read here."""
    path = root / record_dir / RECORD_NAME
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if only_with_sections and not _SECTIONS.search(raw):
        return None
    record = record_from_bytes(raw, path)
    return record if isinstance(record, dict) else None


def run_states(root: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run that carries a readiness, attestation or serving section: its :data:`STATE_COLUMNS` row, a multi-node
    run's readiness with its nodes' (:func:`with_node_readiness`)."""
    rows = []
    if "record_dir" in runs:
        for run_id, record_dir in runs[["run_id", "record_dir"]].itertuples(index=False):
            record = _record(root, str(record_dir), only_with_sections=True)
            if record is not None and record.get("run_id") == run_id:
                rows.append(state_of(record, root / str(record_dir)))
    return with_node_readiness(pd.DataFrame(rows, columns=STATE_COLUMNS), runs)


def with_node_readiness(states: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """A multi-node run one of whose worker nodes the readiness probe found suspect (the loader's WORKERS_STATE) is
    suspect, as if its own probe had said so: never averaged in. Its state and reasons are the loader's, which
    folded the nodes' in (load.with_workers_readiness: the node named after rank 0's own reasons);
    ``own_readiness_state`` stays rank 0's."""
    if WORKERS_STATE not in runs or states.empty:
        return states
    marked = runs.loc[runs[WORKERS_STATE] == SUSPECT].set_index("run_id")
    hit = states["run_id"].isin(marked.index)
    if not hit.any():
        return states
    states = states.copy()
    for column in (READINESS_STATE, READINESS_REASONS):
        states.loc[hit, column] = states.loc[hit, "run_id"].map(marked[column])
    return states


# --- the roofline of each decode figure ---------------------------------------------------------------------

@dataclass(frozen=True)
class Weights:
    bytes: float | None  # the bytes a decode step reads per token; None: unknown, ``problem`` says why
    source: str  # e.g. "tensor_bytes from the model card"
    problem: str = ""


#: Where a card's tensor bytes come from, as the roofline's weights column says it.
TENSOR_SOURCES = {"GGUF tensor infos": "tensor bytes of the GGUF served (its tensor infos, the serving record)"}
_CHECKPOINT_TENSORS = "tensor bytes of the checkpoint (model card)"


def _whole_weights(card: dict[str, Any]) -> Weights | None:
    tensor = _number(card.get("tensor_bytes"))
    if tensor and tensor > 0:
        return Weights(tensor, TENSOR_SOURCES.get(str(card.get("weights_source")), _CHECKPOINT_TENSORS))
    params, dtype = _number(card.get("param_count")), card.get("dtype")
    if params and params > 0 and isinstance(dtype, str):
        try:
            return Weights(roofline.weight_bytes(params, dtype), f"{params:.4g} parameters x {dtype} (model card)")
        except roofline.RooflineError:
            pass
    files = _number(card.get("checkpoint_bytes"))
    if files and files > 0:
        return Weights(files, "size of the weight files (model card)")
    return None


def weights_from_card(card: Any) -> Weights | None:
    """A model's weight bytes read per token from its card (provenance.expected: modelcard.fingerprint): the
    safetensors headers' ``tensor_bytes``, else ``param_count`` x the config's dtype, else the files'
    ``checkpoint_bytes``. A mixture of experts (the card's ``moe_experts`` above 1) reads only its active
    parameters: everything but the routed experts plus ``moe_experts_per_token / moe_experts`` of the routed
    experts' bytes (``expert_tensor_bytes``, from the same safetensors headers: roofline.active_weight_bytes).
    Where the card does not give them the bytes are None with the reason: counting every expert would put the
    roofline far below what the model reaches (gpt-oss-120b at 1071%, "implausible")."""
    if not isinstance(card, dict):
        return None
    whole = _whole_weights(card)
    experts, per_token = _number(card.get("moe_experts")), _number(card.get("moe_experts_per_token"))
    if whole is None or experts is None or experts <= 1:
        return whole
    routed = _number(card.get("expert_tensor_bytes"))
    moe = f"a mixture of {experts:.0f} experts" + (f", {per_token:.0f} per token" if per_token else "")
    if per_token is None or per_token < 1 or per_token > experts:
        return Weights(None, "model card", f"{moe}: the model card gives no valid experts per token "
                                           f"(config.json: {' / '.join(modelcard.MOE_PER_TOKEN_KEYS)})")
    if not routed or card.get("weights_source") not in ("safetensors headers", "GGUF tensor infos") or \
            whole.source not in (_CHECKPOINT_TENSORS, *TENSOR_SOURCES.values()):
        return Weights(None, "model card", f"{moe}: the model card does not give the routed experts' bytes (read "
                                           "from the safetensors headers since issue 32): the active weights are "
                                           "unknown, and every expert's would understate the roofline")
    active = roofline.active_weight_bytes(whole.bytes, routed, int(experts), int(per_token))
    shared = _number(card.get("moe_shared_experts"))
    return Weights(active, f"active weights of {moe}{f' and {shared:.0f} shared' if shared else ''}: "
                           f"{(whole.bytes - routed) / 1e9:.2f} GB besides the routed experts + {per_token:.0f}/"
                           f"{experts:.0f} of their {routed / 1e9:.2f} GB (model card)")


def weights_built(loaded: Any) -> Weights | None:
    """Without a model card (a preset built from random weights, a model from the engine's own cache): the weight
    bytes the engine says it built on the device (provenance.loaded.weights_bytes: hf-generate's weight_bytes)."""
    built = _number(loaded.get("weights_bytes")) if isinstance(loaded, dict) else None
    return Weights(built, "weights the engine built on the device (its own count)") if built and built > 0 else None


def weights_in_log(run_dir: Path) -> Weights | None:
    """The same figure read from the run's own output (bench.log, the raw evidence beside the record), for
    records written before the engine's weight bytes were kept in provenance.loaded: hf-generate prints
    ``weight_bytes``."""
    try:
        text = (run_dir / "bench.log").read_bytes()
    except OSError:
        return None
    built = _number(parse_log(text).extra.get("weight_bytes"))
    return Weights(built, "weights the engine built on the device (its output)") if built and built > 0 else None


def model_weights(root: Path, runs: pd.DataFrame) -> dict[str, Weights]:
    """model -> its weight bytes, from the first of its runs whose record's provenance carries a model card."""
    out: dict[str, Weights] = {}
    if "record_dir" not in runs:
        return out
    for model, group in runs.groupby("model", sort=True):
        for record_dir in group["record_dir"]:
            record = _record(root, str(record_dir), only_with_sections=False) or {}
            provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
            weights = (weights_from_card(provenance.get("expected")) or weights_built(provenance.get("loaded"))
                       or weights_in_log(root / str(record_dir)))
            if weights:
                out[str(model)] = weights
                break
    return out


def batch_of(params: Any) -> int | None:
    """The batch a decode figure was measured at: the workload's ``concurrency``, else its ``batch``; 1 in
    latency mode; None when unknown (a throughput run that let the engine batch as it liked)."""
    params = params if isinstance(params, dict) else {}
    for key in ("concurrency", "batch"):
        value = _number(params.get(key))  # a loaded column mixing ints and NaN holds 4.0
        if value is not None and value >= 1 and value == int(value):
            return int(value)
    return 1 if params.get("mode") == "latency" else None


def _workload_params(runs: pd.DataFrame) -> pd.Series:
    """Each run's workload parameters as a dict (the loader flattens them to ``workload_*`` columns)."""
    columns = [c for c in runs.columns if c.startswith("workload_") and c != "workload"]
    records = runs[columns].to_dict("records") if columns else [{} for _ in range(len(runs))]
    return pd.Series([{k[len("workload_"):]: (None if isinstance(v, float) and math.isnan(v) else v)
                       for k, v in r.items()} for r in records], index=runs.index, dtype=object)


ROOFLINE_COLUMNS = ["host", "model", "environment", "workload", "metric", "depth", "point", "batch", "n", "mean_tok_s",
                    "max_tok_s",
                    "roofline_tok_s", "percent", "max_percent", "implausible", "weight_bytes", "weight_source",
                    "bandwidth_bytes_s", "bandwidth_method", "decoder", "note"]


def _fact(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def decoder_words(decode_path: Any, launch_bound: Any, compile_tuning: Any, tuned_now: Any = None) -> str:
    """How an engine said it decoded (its record's extra.engine), in words; "" where it said nothing.
    ``tuned_now``: the kernels the run's process tuned itself (hf-generate's compile_tuned_now)."""
    decode_path, launch_bound, compile_tuning, tuned_now = map(
        _fact, (decode_path, launch_bound, compile_tuning, tuned_now))
    if decode_path is None and launch_bound is None:
        return ""
    words = [str(decode_path or "decoder")]
    if launch_bound is not None and bool(launch_bound):  # the parser's bool, whatever the column's dtype
        words.append("launch-bound: measures the host's Python and launches, not the GPU")
    if compile_tuning == "coordinate-descent":
        if tuned_now is None:  # records from before the count: torch 2.11 tuned in every process then
            words.append("coordinate-descent kernels, where tuned not recorded (tuned anew in each process, "
                         "runs differ by several percent, unless read from a cache)")
        elif int(tuned_now) > 0:
            words.append("coordinate-descent kernels tuned in this run's process")
        else:
            words.append("coordinate-descent kernels from the host's tuning cache")
    return ", ".join(words)


def run_decoders(runs: pd.DataFrame) -> dict[str, str]:
    """run_id -> decoder_words of the runs whose records carry the engine's facts."""
    columns = ["engine_decode_path", "engine_launch_bound", "engine_compile_tuning", "engine_compile_tuned_now"]
    if runs.empty or not any(c in runs for c in columns):
        return {}
    facts = [runs[c] if c in runs else pd.Series(None, index=runs.index, dtype=object) for c in columns]
    return {run: words for run, *values in zip(runs["run_id"], *facts, strict=True)
            if (words := decoder_words(*values))}


def _serving_c1_long(states: pd.DataFrame) -> pd.DataFrame:
    """states' serving_c1_points as rows: run_id, depth, point ("d4096.pp512.tg64"), value."""
    rows = [{"run_id": run, "depth": p["depth"], "point": f"d{p['depth']}.pp{p['pp']}.tg{p['tg']}", "value": p["tok_s"]}
            for run, points in zip(states["run_id"], states["serving_c1_points"], strict=True)
            if isinstance(points, list) for p in points]
    return pd.DataFrame(rows, columns=["run_id", "depth", "point", "value"])


def decode_figures(runs: pd.DataFrame, states: pd.DataFrame) -> pd.DataFrame:
    """Long table of each measured run's decode figures: output_tok_s, decode_tok_s (batch x 1000 / tpot_ms)
    and the serving decode at concurrency 1 per depth (one row per (depth, pp, tg) of the run's profile: ``depth``
    and ``point`` say which; never averaged across depths, where the KV cache read makes decode slower), with the
    batch they were measured at. ``point`` is "" and ``depth`` NaN for the other figures."""
    keys = ["run_id", "host", "model", "environment", "workload"]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "batch", "metric", "value", "depth", "point"])
    params = _workload_params(runs)
    batch = pd.Series([batch_of(p) for p in params], index=runs.index, dtype="float64")
    base = runs[keys].assign(batch=batch)
    parts = [base.assign(metric="output_tok_s", value=runs["output_tok_s"].astype("float64"))]
    if "tpot_ms" in runs:
        tpot = runs["tpot_ms"].astype("float64")
        parts.append(base.assign(metric="decode_tok_s", value=(batch * 1000.0 / tpot).where(tpot > 0)))
    parts = [part.assign(depth=float("nan"), point="") for part in parts]
    if not states.empty and "serving_c1_points" in states and states["serving_c1_points"].notna().any():
        c1 = _serving_c1_long(states)
        parts.append(base.drop(columns=["batch"]).merge(c1, on="run_id").assign(
            metric="tg_req_tok_s_c1", batch=1.0, value=lambda f: f["value"].astype("float64"),
            depth=lambda f: f["depth"].astype("float64")))
    long = pd.concat(parts, ignore_index=True)
    return long[long["value"].notna()].reset_index(drop=True)


def roofline_cells(runs: pd.DataFrame, states: pd.DataFrame, bandwidth: dict[str, dict[str, Any]],
                   weights: dict[str, Weights]) -> pd.DataFrame:
    """Per (host, model, environment, workload, decode metric, serving point): the mean figure and its share of the
    roofline ``batch x bandwidth / weight bytes`` (weights only: the KV cache's reads would lower the roofline, so
    the percentage is a lower bound and a figure above 100% is impossible without speculative decoding; a mixture
    of experts' active weights only: weights_from_card). The serving decode at concurrency 1 has one row per depth
    (``depth``, ``point``), never an average across depths. ``implausible`` when any run's figure is above its
    roofline. ``note`` says why a cell has no percentage."""
    figures = decode_figures(runs, states)
    decoders = run_decoders(runs)
    rows = []
    for (host, model, env, workload, metric, point), cell in figures.groupby(
            ["host", "model", "environment", "workload", "metric", "point"], sort=True):
        bw = bandwidth.get(str(host)) or {}
        w = weights.get(str(model))
        batches = cell["batch"].dropna().unique()
        depths = cell["depth"].dropna().unique()
        row = {"host": host, "model": model, "environment": env, "workload": workload, "metric": metric,
               "depth": int(depths[0]) if len(depths) == 1 else None, "point": point,
               "batch": int(batches[0]) if len(batches) == 1 else None, "n": len(cell),
               "mean_tok_s": float(cell["value"].mean()), "max_tok_s": float(cell["value"].max()),
               "roofline_tok_s": None, "percent": None, "max_percent": None, "implausible": False,
               "weight_bytes": w.bytes if w else None, "weight_source": w.source if w else None,
               "bandwidth_bytes_s": bw.get("bytes_per_s"), "bandwidth_method": bw.get("method"),
               "decoder": " / ".join(sorted({decoders[r] for r in cell["run_id"] if r in decoders})), "note": ""}
        if not bw.get("bytes_per_s"):
            row["note"] = "no measured bandwidth" + (f" ({bw['reason']})" if bw.get("reason") else "")
        elif w is None:
            row["note"] = "model weight bytes unknown (no model card in the records)"
        elif w.bytes is None:
            row["note"] = w.problem
        elif row["batch"] is None:
            row["note"] = "batch unknown (the engine chose it)"
        else:
            mean = roofline.assess(row["mean_tok_s"], bw["bytes_per_s"], w.bytes, batch=row["batch"])
            top = roofline.assess(row["max_tok_s"], bw["bytes_per_s"], w.bytes, batch=row["batch"])
            row.update(roofline_tok_s=mean["roofline_tok_s"], percent=mean["percent_of_roofline"],
                       max_percent=top["percent_of_roofline"], implausible=top["implausible"])
        rows.append(row)
    table = pd.DataFrame(rows, columns=ROOFLINE_COLUMNS)
    order = table.assign(_depth=table["depth"].astype("float64")).sort_values(
        ["host", "model", "environment", "workload", "metric", "_depth", "point"], kind="stable").index
    return table.loc[order].reset_index(drop=True)


#: Per cell: ``j_per_output_token`` and ``joules_mean`` are the whole run's (the record's energy over every sample,
#: start-up included); ``j_per_output_token_steady`` (mean power over the load's window / the run's output rate,
#: host_state.energy_split) is the figure to compare, ``startup_j_mean`` the start-up energy apart from it, and
#: ``steady_note`` says where the steady figure came from or why a run has none.
ENERGY_COLUMNS = ["host", "model", "environment", "workload", "n", "j_per_output_token", "joules_mean", "scope",
                  "n_steady", "j_per_output_token_steady", "steady_power_w", "startup_j_mean", "steady_note"]


def _steady_note(sources: pd.Series, errors: pd.Series) -> str:
    said = sorted({str(s) for s in sources.dropna()})
    why = sorted({str(e) for e in errors.dropna()})
    return "; ".join([*said, *(f"no steady figure: {e}" for e in why)])


def energy_cells(runs: pd.DataFrame, states: pd.DataFrame) -> pd.DataFrame:
    """Per cell where power was sampled: the mean energy per output token over the load's steady window and the
    start-up energy apart (labelled), beside the whole run's figures, with the scope's label."""
    if states.empty or states[["j_per_output_token", "j_per_output_token_steady"]].isna().all(axis=None):
        return pd.DataFrame(columns=ENERGY_COLUMNS)
    keys = ["host", "model", "environment", "workload"]
    data = runs[["run_id", *keys]].merge(states[["run_id", "j_per_output_token", "energy_j", "energy_scope",
                                                 "j_per_output_token_steady", "steady_power_w", "startup_energy_j",
                                                 "steady_source", "steady_error"]], on="run_id")
    data = data[data["j_per_output_token"].notna() | data["j_per_output_token_steady"].notna()]
    numbers = ["j_per_output_token", "energy_j", "j_per_output_token_steady", "steady_power_w", "startup_energy_j"]
    data = data.astype({c: "float64" for c in numbers})
    out = data.groupby(keys, sort=True).agg(n=("run_id", "size"),
                                            j_per_output_token=("j_per_output_token", "mean"),
                                            joules_mean=("energy_j", "mean"),
                                            scope=("energy_scope", lambda s: scope_words(s.dropna().unique())),
                                            n_steady=("j_per_output_token_steady", "count"),
                                            j_per_output_token_steady=("j_per_output_token_steady", "mean"),
                                            steady_power_w=("steady_power_w", "mean"),
                                            startup_j_mean=("startup_energy_j", "mean"))
    notes = data.groupby(keys, sort=True).apply(
        lambda g: _steady_note(g["steady_source"], g["steady_error"].where(g["j_per_output_token_steady"].isna())),
        include_groups=False).rename("steady_note")
    return out.join(notes).reset_index()[ENERGY_COLUMNS]


def scope_words(scopes) -> str:
    """The energy scope in words ("GPU rail only" on GB10), several joined; "unknown scope" when none is given."""
    names = [SCOPE_WORDS.get(str(s), str(s)) for s in scopes]
    return " / ".join(sorted(set(names))) or "unknown scope"


# --- a reference: a previous campaign, or published figures --------------------------------------------------

#: The keys of one published figure in a reference file (``environment`` optional: any environment; ``point``, e.g.
#: d0.c1.pp512.tg64, for a serving metric: the point it was measured at).
REFERENCE_KEYS = ("metric", "model", "workload", "value", "source")


def load_reference_figures(path: Path) -> pd.DataFrame:
    """Published figures from a YAML or JSON file: a list of ``{metric, model, workload, value, source}``
    (``environment`` and, for a serving metric, ``point`` optional), or ``{"figures": [...]}``. UsageError naming
    the file and the bad entry."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--reference {path}: cannot read it ({exc})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--reference {path}: not valid JSON ({exc})") from None
    else:
        import yaml  # noqa: PLC0415 - only for YAML references

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"--reference {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(data, dict) and "figures" in data:
        data = data["figures"]
    if not isinstance(data, list) or not data:
        raise UsageError(f"--reference {path}: expected a non-empty list of {{{', '.join(REFERENCE_KEYS)}}} "
                         "(or {figures: [...]})")
    rows = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise UsageError(f"--reference {path}: entry {i} is not a mapping")
        missing = [k for k in REFERENCE_KEYS if entry.get(k) in (None, "")]
        if missing:
            raise UsageError(f"--reference {path}: entry {i} lacks {', '.join(missing)}")
        value = _number(entry["value"])
        if value is None or value <= 0:
            raise UsageError(f"--reference {path}: entry {i} value {entry['value']!r} is not a positive number")
        point = entry.get("point")
        rows.append({"metric": str(entry["metric"]), "model": str(entry["model"]),
                     "workload": str(entry["workload"]), "environment": entry.get("environment"),
                     "point": str(point) if point not in (None, "") else None,
                     "value": value, "source": str(entry["source"])})
    return pd.DataFrame(rows)
