# -*- coding: utf-8 -*-
"""The load generators of serving runs: one driver per client (its argv per point, its output parsed), and the
loopback corpus server.

A driver is a class with ``name``, ``point_argv(...)``, ``parse_point(json_bytes, point)`` and
``version(client_path)``; :data:`DRIVERS` names them. A second client (AIPerf) is one more class and row.
The client runs on the host, outside the run's environment, against the server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import math
import os
import re
import subprocess
import threading

#: llama-benchy's per-run metric (benchmarks[] entry key) -> the point's metric (contract.record.SERVING_METRICS,
#: a test holds every name to it). Its BenchmarkRun model:
#: llama-benchy 0.4.0 llama_benchy/results.py (pp/tg throughput in tokens/s: ``t_s`` aggregate, ``t_s_req`` per
#: request; ttfr, est_ppt, e2e_ttft already scaled to ms by its _calculate_metric(values, 1000)).
LLAMA_BENCHY_METRICS = (
    ("pp_throughput", "pp_tok_s"),
    ("pp_req_throughput", "pp_req_tok_s"),
    ("tg_throughput", "tg_tok_s"),
    ("tg_req_throughput", "tg_req_tok_s"),
    ("peak_throughput", "peak_tg_tok_s"),
    ("ttfr", "ttfr_ms"),
    ("est_ppt", "est_ppt_ms"),
    ("e2e_ttft", "e2e_ttft_ms"),
)
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?(?:[.+-]?[A-Za-z0-9.]+)?)")


class ClientOutputError(Exception):
    """The client's output file is not what its driver reads."""


def client_env(run_dir: str) -> dict:
    """The client's environment additions: offline, its own HOME (llama-benchy caches the corpus under
    ~/.cache/llama-benchy: per run, deleted after), and no proxy between it and the loopback server."""
    return {"HF_HUB_OFFLINE": "1", "HOME": os.path.join(run_dir, ".client-home"),
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


class LlamaBenchy:
    """llama-benchy (https://github.com/eugr/llama-benchy), 0.4.0's CLI (llama_benchy/config.py)."""

    name = "llama-benchy"
    #: What point_argv sets, and what sets it instead: a workload's client_args naming one of these flags is
    #: refused (serving.overriding_args, read by the campaign's validation). llama-benchy 0.4.0's parser is
    #: argparse's: an unambiguous prefix (``--conc``) is the flag too (ABBREV).
    OWNS = ((("--base-url",), "it is the server sparkfleet started (127.0.0.1, the workload's port)"),
            (("--model", "--served-model-name"), "use the workload's served_model_name field"),
            (("--tokenizer",), "use the model's tokenizer field (default: its directory, or its GGUF's)"),
            (("--pp",), "use the workload's profile (pp)"),
            (("--tg", "--exact-tg"), "use the workload's profile (tg; every point decodes exactly tg tokens)"),
            (("--depth",), "use the workload's profile (depth)"),
            (("--concurrency",), "use the workload's profile (concurrency)"),
            (("--runs",), "use the workload's runs field"),
            (("--no-cache", "--enable-prefix-caching"), "use the workload's prefix_caching field"),
            (("--latency-mode",), "every point is measured in api latency mode"),
            (("--format", "--save-result"), "sparkfleet reads the JSON it saves for each point"),
            (("--book-url",), "use the sparkfleet_serving_corpus setting (default: the collection's corpus)"))
    ABBREV = True
    #: What makes llama-benchy skip its coherence check (after the warm-up it asks the model the capital of France
    #: and fails the point on a wrong answer, which a random-weight model always gives): added for a model with
    #: random_weights; a workload may give it in client_args too.
    SKIP_COHERENCE = "--skip-coherence"

    @staticmethod
    def point_argv(client: str, point: dict, base_url: str, model_name: str, tokenizer: str, runs: int,
                   prefix_caching: bool, corpus_url, out_json: str, extra=None, skip_coherence: bool = False) -> list:
        """One invocation per point: --pp/--tg/--depth/--concurrency one level each, JSON saved to ``out_json``.

        ``prefix_caching``: false sends unique prompts and cache_prompt=false (--no-cache); true measures the
        context load and the cached follow-up separately (--enable-prefix-caching, Spark Arena's setting).
        ``--exact-tg`` asks the server for exactly tg tokens (min_tokens, ignore_eos), so every point decodes
        what it names. ``skip_coherence`` (a model with random_weights): --skip-coherence, unless ``extra`` (the
        workload's client_args) already says it."""
        argv = [str(client), "--base-url", base_url, "--model", model_name, "--tokenizer", tokenizer,
                "--pp", str(point["pp"]), "--tg", str(point["tg"]), "--depth", str(point["depth"]),
                "--concurrency", str(point["concurrency"]), "--runs", str(runs), "--exact-tg",
                "--enable-prefix-caching" if prefix_caching else "--no-cache",
                "--latency-mode", "api", "--format", "json", "--save-result", out_json]
        if corpus_url:
            argv += ["--book-url", corpus_url]
        if skip_coherence and not LlamaBenchy.skips_coherence(extra):
            argv.append(LlamaBenchy.SKIP_COHERENCE)
        return argv + [str(a) for a in (extra or [])]

    @staticmethod
    def skips_coherence(extra) -> bool:
        """Whether client arguments ``extra`` say --skip-coherence (or an argparse abbreviation of it)."""
        for arg in extra or []:
            name = str(arg).split("=", 1)[0].replace("_", "-")
            if len(name) >= len("--sk") and LlamaBenchy.SKIP_COHERENCE.startswith(name):  # --s is ambiguous
                return True
        return False

    @staticmethod
    def coherence(random_weights: bool, extra) -> str:
        """What the run record says of the coherence check: skipped for the model's random_weights, skipped by the
        workload's client_args, or asked."""
        if random_weights:
            return "skipped: the model has random_weights"
        if LlamaBenchy.skips_coherence(extra):
            return "skipped: the workload's client_args say %s" % LlamaBenchy.SKIP_COHERENCE
        return "asked"

    @staticmethod
    def parse_point(data: bytes, point=None, source: str = "llama-benchy output") -> dict:
        """{"metrics", "samples", "context_load"} of one point from llama-benchy's JSON.

        The measured entry is the benchmarks[] run that is not the context-load phase (and, given ``point``,
        has its depth, concurrency, pp and tg); ``context_load`` the same figures of the prefix-caching load
        phase, or None. ``samples``: each metric's raw ``values``, one per llama-benchy run.
        Raises ClientOutputError naming ``source`` for a file that is not llama-benchy JSON."""
        try:
            doc = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClientOutputError("%s: not JSON (%s)" % (source, exc)) from None
        runs = doc.get("benchmarks") if isinstance(doc, dict) else None
        if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            raise ClientOutputError("%s: no benchmarks list (not llama-benchy --format json output)" % source)

        def matches(entry):
            if point is None:
                return True
            return (entry.get("context_size"), entry.get("concurrency"), entry.get("prompt_size"),
                    entry.get("response_size")) == (point["depth"], point["concurrency"], point["pp"], point["tg"])

        measured = [r for r in runs if not r.get("is_context_prefill_phase") and matches(r)]
        loads = [r for r in runs if r.get("is_context_prefill_phase") and matches(r)]
        if len(measured) > 1:
            raise ClientOutputError("%s: %d measured entries for one point" % (source, len(measured)))
        result = _figures(measured[0], source) if measured else {"metrics": {}, "samples": {}}
        result["context_load"] = _figures(loads[0], source) if loads else None
        result["version"] = doc.get("version")
        return result

    @staticmethod
    def version(client: str, timeout_s: float = 120.0):
        """The client's version (``llama-benchy --version``: argparse prints ``llama-benchy 0.4.0``), or None."""
        try:
            proc = subprocess.run([str(client), "--version"], capture_output=True, text=True, errors="replace",
                                  timeout=timeout_s, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = _VERSION.findall(proc.stdout + " " + proc.stderr) if proc.returncode == 0 else []
        return found[-1] if found else None


def _figures(entry: dict, source: str) -> dict:
    metrics, samples = {}, {}
    for key, name in LLAMA_BENCHY_METRICS:
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not _number(value.get("mean")):
            raise ClientOutputError("%s: %s is not a {mean, std, values} metric: %r" % (source, key, value))
        metrics[name] = float(value["mean"])
        values = value.get("values")
        if isinstance(values, list) and all(_number(v) for v in values):
            samples[name] = [float(v) for v in values]
    return {"metrics": metrics, "samples": samples}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: client name -> driver
DRIVERS = {LlamaBenchy.name: LlamaBenchy}


def driver(name) -> type:
    name = name or LlamaBenchy.name
    if name not in DRIVERS:
        raise ValueError("serving client %r is not one of %s" % (name, ", ".join(DRIVERS)))
    return DRIVERS[name]


# ------------------------------------------------------------------------------------- corpus


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the client's requests are not the run's output
        pass


class CorpusServer:
    """A text file served on 127.0.0.1 (an ephemeral port) for the client's --book-url; a context manager.
    Only that file is reachable: it is served from a directory holding nothing else."""

    NAME = "corpus.txt"

    def __init__(self, path: str, scratch_dir: str):
        if not os.path.isfile(path):
            raise ValueError("serving corpus %r is not a file on this host" % path)
        self.path = path
        self.dir = scratch_dir
        self.httpd = None
        self.thread = None

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d/%s" % (self.httpd.server_address[1], self.NAME)

    def __enter__(self):
        os.makedirs(self.dir, exist_ok=True)
        target = os.path.join(self.dir, self.NAME)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        os.symlink(os.path.abspath(self.path), target)
        handler = functools.partial(_QuietHandler, directory=self.dir)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="sparkfleet-corpus", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.dir, self.NAME))
            os.rmdir(self.dir)  # the run directory keeps only what the run produced
        return False
