"""How many runs a campaign plans per host and how long they take, counted before the matrix is expanded.

The matrix is models x environments (A/A twins included) x workloads (memory factors crossed in) x
(iterations + warm-up runs) on every host. :func:`count_runs` multiplies the sizes without building a run,
so a campaign of millions of runs is refused (``max_runs``, :data:`DEFAULT_MAX_RUNS` per host unless the
campaign raises it) in microseconds instead of being planned for minutes.

The duration is an estimate with stated assumptions, per host (hosts run in parallel, so it is also the
campaign's wall time):

* **typical** = per run, the cooldown's shortest wait (``max(min_wait_s, settle_window_s)``: the settle rule
  needs a full window of readings; 0 with the cooldown off) + a nominal run time per engine
  (:func:`nominal_run_s`, at most ``timeout_s``). The nominal times are orders of magnitude, not measurements:
  a TensorRT-LLM run starts the engine and loads the model (minutes for 7B-120B models on a DGX Spark).
* **upper bound** = per run, ``cooldown.max_wait_s`` (when the cooldown is on) + its timeout: no run can take
  longer without being stopped.

A **serving run** (an engine server and a load generator through the points of a profile) is estimated from its
profile, as a rough planning figure only: server start (:func:`server_start_s`, per engine) + for every point,
(runs + the client's warm-up run) x (concurrency x (depth + pp) prompt tokens at :data:`PREFILL_TOK_S` + tg
tokens at :data:`DECODE_TOK_S` per request + :data:`POINT_OVERHEAD_S`), and with an ``sla`` the levels its
search may add at the most (:func:`sla_probe_levels`). The rates are a mid-size model's order
of magnitude on a DGX Spark, not a measurement: prefill at long depth is slower (attention grows with the
context), a prefix cache faster, a small model much faster. Unless the campaign gives ``timeout_s``, a serving
run's timeout is :func:`serving_timeout_s`: its ``ready_timeout_s`` + :data:`SERVING_TIMEOUT_FACTOR` x its
points' estimate, at least the campaign default and at most a week.

What a serving run needs of the model is checked here too, from the model's facts (its own ``context_window`` and
``kv_shape``, else the catalogue's for its hf_id, ``catalogue/models.yml``; a model with neither is not checked):
:func:`window_problems`, a point deeper than the model's context window (every serving engine), and
:func:`kv_problems`, a llama.cpp server whose KV cache (its ``-c`` from serving.llamacpp_sizing x the bytes a
token takes: layers x KV heads x head dim x the K and V types' bytes) does not fit the host's memory
(``sparkfleet_serving_memory_gib``, else a DGX Spark's 128 GB: an assumption every refusal names). vLLM, SGLang and
trtllm-serve size their KV cache from the free memory and queue what does not fit: only llama.cpp allocates what
it is told to.
"""

from __future__ import annotations

import math
import os
from typing import Any

import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import sla_search
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings

#: Most runs per host a campaign may plan unless it sets ``max_runs`` higher (README: Limits).
DEFAULT_MAX_RUNS = 10_000
#: Nominal seconds of one run of an engine the table (serving.ENGINES) gives no ``run_s`` (an assumption, stated
#: in every estimate).
UNKNOWN_ENGINE_S = 300.0


def nominal_run_s(engine: Any) -> float:
    """Nominal seconds of one run of a job engine: its ``run_s`` in serving.ENGINES, else UNKNOWN_ENGINE_S."""
    row = serving.ENGINES.get(engine) if isinstance(engine, str) else None
    return float(row["run_s"]) if row and not row["serves"] else UNKNOWN_ENGINE_S


def server_start_s(engine: Any) -> float:
    """Seconds from a server's start to its first answer (a rough planning figure): its ``start_s`` in
    serving.ENGINES; a campaign's own engine, the slowest built-in server's."""
    starts = {name: serving.ENGINES[name]["start_s"] for name in serving.engine_names(serves=True)}
    return float(starts.get(engine, max(starts.values())) if isinstance(engine, str) else max(starts.values()))


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


def serving_points(workload: dict[str, Any]) -> int:
    """Points per run of a serving workload: depth x concurrency x pp x tg."""
    return settings.profile_points(workload["profile"])


def serving_requests(workload: dict[str, Any]) -> int:
    """Measured requests per run of a serving workload: runs x the concurrency of every point (warm-ups aside)."""
    profile = workload["profile"]
    return (workload["runs"] * sum(profile["concurrency"]) * len(profile["depth"]) * len(profile["pp"])
            * len(profile["tg"]))


def _point_s(workload: dict[str, Any], depth: int, concurrency: int, pp: int, tg: int) -> float:
    """The client's time through one point of a run, its warm-up included (see the module doc)."""
    one_pass = concurrency * (depth + pp) / PREFILL_TOK_S + tg / DECODE_TOK_S + POINT_OVERHEAD_S
    return one_pass * (workload["runs"] + CLIENT_WARMUP_RUNS)


def sla_probe_levels(workload: dict[str, Any]) -> list[int]:
    """The concurrencies an SLA search (run/sla_search.py's Bracket) may measure beyond the profile's, per (depth,
    pp, tg), at the most: the search as it runs when every level below its cap meets the targets and the cap
    does not (doubling up to the cap, then bisection just below it). [] without an sla."""
    sla = workload.get("sla")
    if not isinstance(sla, dict):
        return []
    concurrencies = sorted(set(workload["profile"]["concurrency"]))
    cap = sla_search.cap_of(sla, concurrencies)
    search, levels = sla_search.Bracket(concurrencies[0], cap), []
    while (level := search.next()) is not None:
        levels.append(level)
        search.record(level, level < cap)
    return [level for level in levels if level not in concurrencies]


def _points_s(workload: dict[str, Any]) -> float:
    """The client's time through every point of one run, the SLA search's probes at the most included."""
    profile = workload["profile"]
    probes = sla_probe_levels(workload)
    return sum(_point_s(workload, d, c, pp, tg) for d in profile["depth"] for pp in profile["pp"]
               for tg in profile["tg"] for c in [*profile["concurrency"], *probes])


def serving_run_s(workload: dict[str, Any]) -> float:
    """A rough planning figure for one serving run: server start + its points (see the module doc)."""
    return server_start_s(workload.get("engine")) + _points_s(workload)


def serving_timeout_s(workload: dict[str, Any], default_s: float) -> float:
    """A serving run's timeout when the campaign gives none: ready_timeout_s (an unmanaged server: none) +
    SERVING_TIMEOUT_FACTOR x its points' estimate, rounded up to a minute, at least ``default_s`` (the campaign
    default), at most a week."""
    budget = float(workload.get("ready_timeout_s") or 0.0) + SERVING_TIMEOUT_FACTOR * _points_s(workload)
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
    nominal = serving_run_s(workload) if serving.is_serving(workload) else nominal_run_s(workload.get("engine"))
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
            "shape": " x ".join(f"{len(profile[f.name])} {f.name}" for f in serving.PROFILE_AXES),
            "runs_per_point": workload["runs"], "requests": serving_requests(workload),
            "estimated_s": serving_run_s(workload), "timeout_s": run_timeout_s(campaign, workload)}


def serving_text(campaign: dict[str, Any], workload: dict[str, Any]) -> str:
    """'arena.vllm: 28 points per run (7 depth x 4 concurrency x 1 pp x 1 tg), 378 requests, about 2.2 h per
    run (rough), timeout 6.7 h'."""
    s = serving_summary(campaign, workload)
    return (f"{workload['name']}: {s['points']} points per run ({s['shape']}), {s['requests']} requests "
            f"({s['runs_per_point']} runs per point, plus {CLIENT_WARMUP_RUNS} warm-up each), about "
            f"{duration_text(s['estimated_s'])} per run (a rough planning figure), timeout "
            f"{duration_text(s['timeout_s'])}{kv_text(campaign, workload)}")


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
    engines = sorted({w.get("engine") for w in campaign["workloads"] if not serving.is_serving(w)}, key=str)
    served = [w for w in campaign["workloads"] if serving.is_serving(w)]
    runs = (["a nominal run of " + ", ".join(f"{e} {nominal_run_s(e):.0f} s" for e in engines)]
            if engines else []) \
        + ([f"a serving run's estimate from its profile (server start, prefill at {PREFILL_TOK_S:.0f} tok/s, "
            f"decode at {DECODE_TOK_S:.0f} tok/s per request)"] if served else [])
    return (f"estimated about {duration_text(typical)}, at most {duration_text(upper)} per host (typical: "
            "cooldown max(min_wait_s, settle_window_s) + " + " or ".join(runs)
            + "; at most: cooldown max_wait_s + timeout_s per run"
            + (", a serving run's own timeout unless the campaign gives timeout_s)" if served else ")")
            + "".join(f"; serving {serving_text(campaign, w)}" for w in served))


# ------------------------------------------------------------------------------ what a serving run needs of its model

GIB = float(1 << 30)
#: The memory the KV check assumes without sparkfleet_serving_memory_gib: a DGX Spark's 128 GB of LPDDR5x,
#: unified (CPU and GPU share it, with the OS and the weights), 119.2 GiB.
SPARK_MEMORY_BYTES = 128e9
SPARK_MEMORY_TEXT = ("assumed: a DGX Spark's 128 GB of unified memory; set sparkfleet_serving_memory_gib for another "
                     "host")
#: llama.cpp's KV cache types (-ctk/-ctv, common/arg.cpp "allowed values"; default f16) -> bytes per element:
#: ggml's block sizes (ggml/src/ggml-common.h: q8_0 = 32 values in 34 bytes, q4_0 18, q4_1 20, q5_0 22, q5_1 24,
#: iq4_nl 18).
LLAMACPP_KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                          "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
LLAMACPP_KV_DEFAULT = "f16"
LLAMACPP_K_FLAGS = ("-ctk", "--cache-type-k")
LLAMACPP_V_FLAGS = ("-ctv", "--cache-type-v")


def _model_catalogue() -> dict[str, dict[str, Any]]:
    with open(os.path.join(settings.CATALOGUE, "models.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


#: hf_id -> {context_window, kv_shape}: catalogue/models.yml.
MODEL_FACTS: dict[str, dict[str, Any]] = _model_catalogue()


def model_fact(model: dict[str, Any], key: str) -> tuple[Any, str | None]:
    """(value, where it comes from) of the model's ``context_window`` or ``kv_shape``: the campaign's model entry,
    else the catalogue's figure for its hf_id; (None, None) when neither gives one (or the entry's is malformed:
    refused with its own message)."""
    valid = {"context_window": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
             "kv_shape": lambda v: isinstance(v, dict) and settings.kv_shape_problem(v) is None}[key]
    if valid(model.get(key)):
        return model[key], f"its {key}"
    known = MODEL_FACTS.get(str(model.get("hf_id")), {})
    if valid(known.get(key)):
        return known[key], f"the catalogue's figure for {model['hf_id']}, catalogue/models.yml"
    return None, None


def window_problems(models: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> list[tuple[dict, dict, str]]:
    """(workload, model, problem) for each serving workload whose deepest point needs more tokens (depth + pp + tg)
    than a model's context window: the engine refuses the request (vLLM: above max_model_len) or runs it past what
    the model was made for (llama.cpp warns only). The problem names the points, the deepest one and the window."""
    out = []
    for workload in workloads:
        if not serving.is_serving(workload):
            continue
        try:
            points = serving.profile_points(workload)
        except ValueError:  # refused with its own message
            continue
        for model in models:
            window, source = model_fact(model, "context_window")
            if window is None:
                continue
            over = [p for p in points if p["depth"] + p["pp"] + p["tg"] > window]
            if not over:
                continue
            deepest = max(over, key=lambda p: (p["depth"] + p["pp"] + p["tg"], p["concurrency"]))
            fits = sorted({p["depth"] for p in points} - {p["depth"] for p in over})
            out.append((workload, model, (
                f"{len(over)} of its {len(points)} points need more tokens than model {model['name']}'s context "
                f"window of {window:,} tokens ({source}): the deepest, {deepest['point']}, holds depth "
                f"{deepest['depth']:,} + pp {deepest['pp']:,} + tg {deepest['tg']:,} = "
                f"{deepest['depth'] + deepest['pp'] + deepest['tg']:,} tokens"
                + (f" (the depths that fit: {', '.join(f'{d:,}' for d in fits)})" if fits else "")
                + "; drop the deeper depths from the profile, or run a model whose window holds them (with rope "
                  "scaling the engines are given, set the model's context_window)")))
    return out


def _kv_bytes_per_token(shape: dict[str, int], k_type: str, v_type: str) -> float:
    return shape["layers"] * shape["kv_heads"] * shape["head_dim"] * (
        LLAMACPP_KV_TYPE_BYTES[k_type] + LLAMACPP_KV_TYPE_BYTES[v_type])


def llamacpp_kv(workload: dict[str, Any], model: dict[str, Any]) -> dict[str, Any] | None:
    """The KV cache a llama.cpp run of ``model`` allocates at start: its -c tokens (serving.llamacpp_sizing) x the
    bytes a token takes (kv_shape x the -ctk/-ctv types' bytes; f16 unless server_args say). None when the model's
    kv_shape is unknown, -c is the model's own (``-c 0``), or a cache type is not one llama.cpp has."""
    shape, source = model_fact(model, "kv_shape")
    if shape is None or workload.get("engine") != "llama.cpp":
        return None
    try:
        sizing = serving.llamacpp_sizing(workload)
    except ValueError:
        return None
    extra = [str(a) for a in workload.get("server_args") or []]
    k_type = str(serving.flag_value(extra, LLAMACPP_K_FLAGS) or LLAMACPP_KV_DEFAULT).lower()
    v_type = str(serving.flag_value(extra, LLAMACPP_V_FLAGS) or LLAMACPP_KV_DEFAULT).lower()
    if not sizing["ctx"] or k_type not in LLAMACPP_KV_TYPE_BYTES or v_type not in LLAMACPP_KV_TYPE_BYTES:
        return None
    per_token = _kv_bytes_per_token(shape, k_type, v_type)
    return {**sizing, "bytes": per_token * sizing["ctx"], "per_token": per_token, "k_type": k_type,
            "v_type": v_type, "shape": shape, "source": source}


def serving_memory(host_settings: dict[str, Any] | None) -> tuple[float, str]:
    """(bytes, how it is known) of the memory a llama.cpp server's KV cache must fit on the host."""
    gib = (host_settings or {}).get("sparkfleet_serving_memory_gib")
    if isinstance(gib, (int, float)) and not isinstance(gib, bool) and gib > 0:
        return float(gib) * GIB, "sparkfleet_serving_memory_gib"
    return SPARK_MEMORY_BYTES, SPARK_MEMORY_TEXT


def _kv_text(kv: dict[str, Any]) -> str:
    shape, point = kv["shape"], kv["point"]
    why = (f"{kv['slots']} slots (-np) of {kv['per_slot']:,} tokens: the deepest point, {point['point']}, runs "
           f"{point['concurrency']} requests of depth + pp + tg + {serving.LLAMACPP_SLOT_MARGIN} at once"
           if point else f"server_args' -c, {kv['slots']} slots")
    return (f"-c {kv['ctx']:,} tokens ({why}) x {kv['per_token']:,.0f} bytes a token ({shape['layers']} layers x "
            f"{shape['kv_heads']} KV heads x head dim {shape['head_dim']} x K {kv['k_type']} + V {kv['v_type']}; "
            f"the shape: {kv['source']})")


def kv_problems(campaign: dict[str, Any], host_settings: dict[str, Any] | None = None,
                host: str | None = None) -> list[str]:
    """One problem per llama.cpp workload and model whose KV cache (:func:`llamacpp_kv`) is larger than the host's
    memory (:func:`serving_memory`): llama-server allocates all of it at start and fails to start, or takes the
    memory the weights and the OS need. A floor: the weights and the compute buffers come on top."""
    memory, known = serving_memory(host_settings)
    out = []
    for workload in campaign.get("workloads") or []:
        for model in campaign.get("models") or []:
            kv = llamacpp_kv(workload, model)
            if kv is None or kv["bytes"] <= memory:
                continue
            smaller = [t for t in ("q8_0", "q4_0") if LLAMACPP_KV_TYPE_BYTES[t] < min(
                LLAMACPP_KV_TYPE_BYTES[kv["k_type"]], LLAMACPP_KV_TYPE_BYTES[kv["v_type"]])]
            hint = "".join(f"give server_args [-ctk, {t}, -ctv, {t}] ("
                           f"{_kv_bytes_per_token(kv['shape'], t, t) * kv['ctx'] / GIB:.1f} GiB: a quantised KV "
                           f"cache), " for t in smaller[:1])
            out.append(f"campaign.workloads: workload {workload['name']}, model "
                       f"{model['name']}" + (f", host {host}" if host else "") + f": llama.cpp's KV cache would "
                       f"take {kv['bytes'] / GIB:.1f} GiB, more than the host's {memory / GIB:.1f} GiB ({known}) "
                       f"before the weights are loaded: {_kv_text(kv)}; {hint}drop the deepest depths or the highest "
                       f"concurrency from the profile, or run a model with a smaller KV cache")
    return out


def kv_text(campaign: dict[str, Any], workload: dict[str, Any]) -> str:
    """'; llama.cpp KV cache 23.5 GiB (-c 1,026,880 x f16) for model gpt-oss-20b' for each model whose shape is
    known: what validate and the plan show of a llama.cpp workload ('' otherwise)."""
    parts = []
    for model in campaign.get("models") or []:
        kv = llamacpp_kv(workload, model)
        if kv is not None:
            parts.append(f"{kv['bytes'] / GIB:.1f} GiB (-c {kv['ctx']:,} x {kv['k_type']}/{kv['v_type']}) for model "
                         f"{model['name']}")
    return f", llama.cpp KV cache {', '.join(parts)}" if parts else ""


def too_many(runs: int, cap: int) -> str:
    """The refusal of a matrix above ``cap`` runs per host (without the field name)."""
    return (f"the matrix plans {runs:,} runs per host, above the limit of {cap:,} (max_runs, default "
            f"{DEFAULT_MAX_RUNS:,}); shrink iterations, models, environments or workloads, or set max_runs to at "
            "least that number to run it anyway")
