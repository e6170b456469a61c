# -*- coding: utf-8 -*-
"""Judging one finished run: what its output says, whether the engine loaded the requested model, its status.

Used by ``matrix_run`` (the bench_run module's job) after the run's commands ended: :func:`read_output` parses
``bench.log`` (and ``report.json``), :func:`judge` fills the record's parsed fields and provenance and says
the run's status, reason and figures. Nothing here writes a file.
"""

from __future__ import annotations

import math
import os

from ..engines import modelcard, serving, serving_provenance
from ..parsers import parse_log
from .runexec import model_matches

#: How much of a log's end :func:`last_line` reads.
TAIL_BYTES = 4000


def last_line(path: str) -> str:
    """The log's last line that says something (300 characters at most), or ''."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - TAIL_BYTES, 0))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines()
                     if ln.strip() and not ln.startswith("Run 'docker")]  # docker's usage hint says nothing
        return lines[-1][:300] if lines else ""
    except OSError:
        return ""


def read_output(run_dir: str):
    """The run's parsed output (parsers.ParseResult) from bench.log and report.json, or None if unreadable."""
    try:
        with open(os.path.join(run_dir, "bench.log"), "rb") as fh:
            text = fh.read()
        json_data = None
        report_json = os.path.join(run_dir, "report.json")
        if os.path.exists(report_json):
            with open(report_json, "rb") as fh:
                json_data = fh.read()
        return parse_log(text, json_data)
    except OSError:
        return None


def provenance(model: dict, workload: dict, parsed, cards) -> dict:
    """Did the engine load the requested model? Its output (parsed.loaded) against the model directory's
    card (modelcard.fingerprint, read once per directory and call through ``cards``, a modelcard.Fingerprints).
    A log's model name equal to our own argument is no evidence: only what the engine read from the checkpoint
    can confirm."""
    engine = workload.get("engine", "trtllm")
    try:
        path = model.get("path")
        card, problem = cards.get(path) if path else (
            None, "the model has no path; a Hugging Face id is loaded from the engine's own cache")
        extra = parsed.extra or {}
        world = 1
        for key in ("tp_size", "pp_size"):
            if isinstance(extra.get(key), int) and extra[key] > 0:
                world *= extra[key]
        verdict = modelcard.judge(card, dict(parsed.loaded or {}), problem, world=world,
                                  applicable=engine != "matmul")
    except Exception as exc:  # a bug here must not lose the run: it stays unconfirmed, saying why
        verdict = {"status": "unconfirmed", "reason": "provenance check failed: %s: %s"
                   % (type(exc).__name__, exc), "expected": None, "loaded": None, "checks": {}}
    if parsed.model and not model_matches(model, parsed.model):
        want = model.get("hf_id") or model["name"]
        verdict["checks"]["model_name"] = {"ok": False, "expected": want, "loaded": parsed.model}
        verdict["reason"] = "; ".join(r for r in ("model_name: the engine loaded %s, the campaign asked for %s"
                                                  % (parsed.model, want), verdict.get("reason")) if r)
        verdict["status"] = "mismatch"
    return verdict


#: The most of the log's own facts (parsed.extra) a record keeps, and the longest text among them.
ENGINE_FACTS_MAX, ENGINE_FACT_CHARS = 64, 300


def engine_facts(extra) -> dict:
    """The scalar facts the engine's log stated beside its figures (hf-generate: decoder, decode_path,
    launch_bound, compile_tuning, decoder_setup_s, ...), for the record's ``extra.engine``: how a figure was
    produced stays with it. Lists and objects are left out (the per-iteration values are the samples)."""
    facts = {}
    for key in sorted(extra or {})[:ENGINE_FACTS_MAX]:
        value = extra[key]
        if isinstance(value, str):
            facts[key] = value[:ENGINE_FACT_CHARS]
        elif isinstance(value, float):
            facts[key] = value if math.isfinite(value) else None  # JSON has no NaN or infinity
        elif value is None or isinstance(value, (bool, int)):
            facts[key] = value
    return facts


def judge(record, outcome: dict, parsed, model: dict, workload: dict, timeout_s, run_dir: str, cards):
    """(status, reason, metrics) of a run whose commands ended with ``outcome`` (run_process's dict, with
    ``step`` the step that stopped it, or ``error``). Fills ``record``'s parsed fields and provenance."""
    metrics = dict(parsed.metrics) if parsed else {}
    if parsed:
        record.model_loaded, record.engine_version = parsed.model, parsed.engine_version
        record.metric_sources, record.samples = dict(parsed.sources), dict(parsed.samples)
        record.parse_warnings, record.parse_missing, record.probe = parsed.warnings, parsed.missing, parsed.probe
        record.versions["engine"] = parsed.engine
        record.versions["engine_version"] = parsed.engine_version
        record.provenance = provenance(model, workload, parsed, cards)
        facts = engine_facts(parsed.extra)
        if facts:
            record.extra = {**(record.extra or {}), "engine": facts}
    if outcome.get("error"):
        return "failed", outcome["error"], metrics
    step = outcome.get("step", "bench")
    if outcome["timed_out"]:
        return "timeout", "timed out after %.0f s (step %s)" % (float(timeout_s), step), metrics
    if outcome["rc"] != 0:
        log = os.path.join(run_dir, "bench.log" if step == "bench" else "%s.log" % step)
        return "failed", "step %s exited %s: %s" % (step, outcome["rc"], last_line(log)), metrics
    if not metrics:
        missing = ", ".join(parsed.missing) if parsed else "bench.log unreadable"
        return "failed", "no figures in bench.log (missing: %s)" % missing, metrics
    if parsed and parsed.model and not model_matches(model, parsed.model):
        return "invalid", "log says model %r was loaded, campaign asked for %r" % (
            parsed.model, model.get("hf_id") or model["name"]), metrics
    verdict = record.provenance or {}
    if verdict.get("status") == "mismatch":
        return "invalid", "provenance: %s" % verdict.get("reason"), metrics
    # Unconfirmed stays ok for the statistics; the reason and the report's warning say so.
    reason = None if verdict.get("status") in ("confirmed", "not_applicable") else (
        "provenance unconfirmed: %s" % (verdict.get("reason") or "the log does not show the loaded model"))
    return "ok", reason, metrics


# ------------------------------------------------------------------------------------ serving


def serving_kv(log_format, log_path: str, engine: str = "") -> dict:
    """The engine's own KV sizing from its server log (parsers.serving_kv.parse_kv, read in the built-in engine's
    ``log_format``), or {"error": why not}: no format declared (a campaign engine's ``kv_log: null``), no parser,
    an unreadable log."""
    if not log_format:
        return {"error": "engine %s declares no KV log format (kv_log: null)" % engine}
    try:
        from ..parsers import serving_kv as kv_parser
    except ImportError as exc:
        return {"error": "no KV parser for serving logs: %s" % exc}
    try:
        with open(log_path, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        kv = kv_parser.parse_kv(log_format, text)
    except Exception as exc:  # a parser bug must not lose the run's points
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    return dict(kv) if isinstance(kv, dict) else {"error": "parse_kv returned %r" % (kv,)}


def serving_provenance_of(record, run_dir: str, model: dict, served, seen) -> dict:
    """The provenance of a serving run (serving_provenance.judge): the weights' card read as the server started
    (``served``: run_launch.Launcher.served) against what the engine showed it loaded (llama-server's model meta,
    the start-up lines in server.log), the weights at that path against the first run of the campaign that served
    them (``seen``: a serving_provenance.SeenWeights, or None), the model's hf_id against a GGUF's source."""
    section = record.serving or {}
    try:
        served = served or {}
        card, problem = served.get("card"), served.get("problem")
        if card is None and problem is None:
            problem = "the weights were not read (the server never started)"
        try:
            with open(os.path.join(run_dir, "server.log"), "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        loaded = serving_provenance.loaded_from_log(section.get("engine"), text)
        meta = (section.get("server") or {}).get("model_meta")
        if isinstance(meta, dict) and "error" not in meta:
            loaded.update(serving_provenance.loaded_from_meta(meta))
        first, changes = seen.check(card, record.run_id) if seen is not None else (None, [])
        return serving_provenance.judge(model, card, problem, loaded, first, changes)
    except Exception as exc:  # a bug here must not lose the run: it stays unconfirmed, saying why
        return {"status": "unconfirmed", "reason": "provenance check failed: %s: %s" % (type(exc).__name__, exc),
                "expected": None, "loaded": None, "checks": {}}


def judge_serving(record, outcome: dict, run_dir: str, model=None, served=None, seen=None):
    """(status, reason, metrics) of a serving run (run_launch.Launcher.serve's ``outcome``); fills the serving
    section's ``kv`` and, given the run's ``model``, the record's provenance (:func:`serving_provenance_of`; an
    unmanaged server's: not_applicable, serving.UNMANAGED saying why, and no KV figure). ok
    when every point is ok; ok with a reason naming the failed points when some are; failed when none is or the
    server never became ready (timeout when the run's time ran out first); invalid when the weights served are
    not the campaign's (provenance mismatch)."""
    status, reason, metrics = _judge_points(record, outcome, run_dir)
    if model is None:
        return status, reason, metrics
    if ((record.serving or {}).get("server") or {}).get("managed") is False:  # an endpoint it did not start
        record.provenance = {"status": "not_applicable", "reason": serving.UNMANAGED, "expected": None,
                             "loaded": None, "checks": {}}
        return status, reason, metrics
    verdict = record.provenance = serving_provenance_of(record, run_dir, model, served, seen)
    if status != "ok":
        return status, reason, metrics
    if verdict.get("status") == "mismatch":
        return "invalid", "; ".join(r for r in ("provenance: %s" % verdict.get("reason"), reason) if r), metrics
    if verdict.get("status") != "confirmed":  # ok for the statistics; the reason and the report's warning say so
        reason = "; ".join(r for r in (reason, "provenance unconfirmed: %s" % (
            verdict.get("reason") or "the engine did not show the model it loaded")) if r)
    return status, reason, metrics


def _judge_points(record, outcome: dict, run_dir: str):
    section = record.serving or {}
    # a campaign's own engine names the built-in log format it shares (kv_log), or none
    if (section.get("server") or {}).get("managed") is False:  # no log of a server sparkfleet did not start
        kv = section["kv"] = {"error": serving.UNMANAGED}
    else:
        log_format = serving.kv_log({**(record.workload_params or {}), "engine": section.get("engine")})
        kv = section["kv"] = serving_kv(log_format, os.path.join(run_dir, "server.log"), section.get("engine"))
    if record.engine_version is None and kv.get("engine_version"):  # the version command said nothing: the log's
        record.engine_version = record.versions["engine_version"] = kv["engine_version"]
        entry = section.setdefault("engine_version", {})
        if isinstance(entry, dict):
            entry.update(version=kv["engine_version"], source="server.log (its start-up banner)")
    metrics = {}
    for name in ("kv_cache_gib", "peak_memory_gib"):  # engine-wide figures; a memory metric names its source
        value = kv.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[name] = float(value)
            record.metric_sources[name] = "server.log: %s" % (kv.get("source") or "the engine's KV line")
    if outcome.get("error"):
        return "failed", outcome["error"], metrics
    points = section.get("points") or []
    failed = [p for p in points if p.get("status") != "ok"]
    named = "; ".join("%s: %s" % (p["point"], p.get("reason")) for p in failed)
    if not points or len(failed) == len(points):
        status = "timeout" if outcome.get("deadline_hit") else "failed"
        return status, "no point ok (%s)" % (named or "the profile has no points"), metrics
    if failed:
        return "ok", "%d of %d points failed: %s" % (len(failed), len(points), named), metrics
    return "ok", None, metrics
