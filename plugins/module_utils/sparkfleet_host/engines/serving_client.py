# -*- coding: utf-8 -*-
"""The load generators of serving runs: one driver per client (its argv per point, its output parsed), and the
loopback corpus server.

A driver is a class with ``name``, the package and version the serving_client role installs (``PACKAGE``,
``PIN``), ``OWNS``/``ABBREV`` (the flags it sets), ``ENV`` (its environment additions over :func:`client_env`),
``raw_name(point)`` (its output file, under the run's points/), ``refusals(workload)`` (what of a workload it
cannot measure), ``point_argv(...)``, ``parse_point(json_bytes, point)``, ``sla_latencies(entry, run_dir, goals)``
(a measured point's latencies at the sla targets' percentiles, run/sla_search.py) and ``version(client_path)``;
:data:`DRIVERS` names them: llama-benchy (the default) and AIPerf.
The client runs on the host, outside the run's environment, against the server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import math
import os
import re
import subprocess
import threading

from ..run import sla_search

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


def client_env(run_dir: str, drv=None) -> dict:
    """The client's environment additions: offline, its own HOME (llama-benchy caches the corpus under
    ~/.cache/llama-benchy: per run, deleted after), and no proxy between it and the loopback server; then the
    driver's own ``ENV`` (``drv``: a driver class, or None for none)."""
    env = {"HF_HUB_OFFLINE": "1", "HOME": os.path.join(run_dir, ".client-home"),
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    return dict(env, **(getattr(drv, "ENV", None) or {}))


class LlamaBenchy:
    """llama-benchy (https://github.com/eugr/llama-benchy), 0.4.0's CLI (llama_benchy/config.py)."""

    name = "llama-benchy"
    #: What the serving_client role installs (pip, into <work_dir>/clients/<name>), and the executable in its venv.
    PACKAGE, PIN, EXECUTABLE = "llama-benchy", "0.4.0", "llama-benchy"
    ENV: dict = {}
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
    def raw_name(point_name: str) -> str:
        """The point's output file under the run's points/ directory: the JSON --save-result writes."""
        return point_name + ".json"

    @staticmethod
    def refusals(workload: dict) -> list:
        """What of ``workload`` llama-benchy cannot measure: [(field, text)]; it measures every profile."""
        return []

    @staticmethod
    def point_argv(client: str, point: dict, base_url: str, model_name: str, tokenizer: str, runs: int,
                   prefix_caching: bool, corpus_url, out_json: str, extra=None, skip_coherence: bool = False,
                   seed=None) -> list:
        """One invocation per point: --pp/--tg/--depth/--concurrency one level each, JSON saved to ``out_json``.

        ``prefix_caching``: false sends unique prompts and cache_prompt=false (--no-cache); true measures the
        context load and the cached follow-up separately (--enable-prefix-caching, Spark Arena's setting).
        ``--exact-tg`` asks the server for exactly tg tokens (min_tokens, ignore_eos), so every point decodes
        what it names. ``skip_coherence`` (a model with random_weights): --skip-coherence, unless ``extra`` (the
        workload's client_args) already says it. ``seed``: unused (llama-benchy draws its own prompts)."""
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
    def sla_latencies(entry: dict, run_dir: str, goals: dict) -> dict:
        """The point's latencies at the sla targets' percentiles (run/sla_search.py), from its per-request samples:
        ``ttft_ms`` from ``e2e_ttft_ms`` (time to the first token); ``tpot_ms`` (time per output token) derived
        from each request's decode rate ``tg_req_tok_s`` as 1000 / rate ms per token (llama-benchy gives no
        per-token times). A target whose samples are missing is None (unread: the search stops there)."""
        samples = entry.get("samples") or {}
        out = {}
        if "ttft_ms" in goals:
            out["ttft_ms"] = sla_search.percentile(samples.get("e2e_ttft_ms") or [], goals["ttft_ms"]["percentile"])
        if "tpot_ms" in goals:
            rates = [v for v in samples.get("tg_req_tok_s") or [] if _number(v) and v > 0]
            out["tpot_ms"] = sla_search.percentile([1000.0 / v for v in rates], goals["tpot_ms"]["percentile"])
        return out

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


#: AIPerf's metric (a top-level key of profile_export_aiperf.json, each ``{unit, avg, p1..p99, min, max, std,
#: count, sum}``) -> the point's metric, with the unit its ``avg`` must be in. AIPerf 0.13.0 (PyPI wheel, whose
#: aiperf/metrics/types/*.py define them): time_to_first_token = first content chunk - request start (llama-benchy's
#: e2e_ttft); inter_token_latency = (request latency - TTFT) / (output tokens - first chunk's); output_token_throughput
#: = output tokens / benchmark duration; output_token_throughput_per_user = 1 / inter_token_latency, per request;
#: request_throughput = requests / duration; goodput = requests meeting --goodput / duration (only with --goodput).
#: The names are the same in every schema version (ai-dynamo/aiperf docs/reference/json-export-schema.md at
#: 1554b478d4eec073cb23365b2c1e1b6dbece2e62: 1.0-1.5 add fields, never rename these); schema 1.5 renamed only the
#: GPU telemetry metrics to ``nvidia_*``, hence the energy metric's two names (the first one present is read).
AIPERF_METRICS = (
    (("time_to_first_token",), "ms", "e2e_ttft_ms"),
    (("inter_token_latency",), "ms", "itl_ms"),
    (("output_token_throughput",), "tokens/sec", "out_tok_s"),
    (("output_token_throughput_per_user",), "tokens/sec/user", "out_req_tok_s"),
    (("request_throughput",), "requests/sec", "req_per_s"),
    (("goodput",), "requests/sec", "goodput_per_s"),
    (("nvidia_output_tokens_per_joule", "output_tokens_per_joule"), "tokens/J", "out_tok_per_j"),
)


class AIPerf:
    """NVIDIA AIPerf (https://github.com/ai-dynamo/aiperf), 0.13.0's ``aiperf profile`` CLI (the PyPI wheel's
    aiperf/config/flags/cli_config.py; cyclopts: no abbreviated flags)."""

    name = "aiperf"
    PACKAGE, PIN, EXECUTABLE = "aiperf", "0.13.0", "aiperf"
    #: AIPerf 0.13.0 loads a tokenizer under HF_HUB_OFFLINE through the hub cache even for a local directory
    #: (aiperf/common/tokenizer.py Tokenizer._from_pretrained_local: snapshot_download(local_files_only=True),
    #: which refuses a path): offline mode off for it; a local directory never reaches the network.
    ENV = {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "", "HF_HUB_DISABLE_TELEMETRY": "1"}
    OWNS = ((("--url", "-u"), "it is the server sparkfleet started (127.0.0.1, the workload's port)"),
            (("--model-names", "--model", "-m"), "use the workload's served_model_name field"),
            (("--tokenizer",), "use the model's tokenizer field (default: its directory, or its GGUF's)"),
            (("--endpoint-type", "--streaming"), "every point streams chat completions"),
            (("--prompt-input-tokens-mean", "--synthetic-input-tokens-mean", "--isl", "--prompt-input-tokens-stddev",
              "--synthetic-input-tokens-stddev", "--isl-stddev"), "use the workload's profile (pp)"),
            (("--prompt-output-tokens-mean", "--output-tokens-mean", "--osl", "--prompt-output-tokens-stddev",
              "--output-tokens-stddev", "--osl-stddev", "--use-server-token-count"),
             "use the workload's profile (tg; every point decodes exactly tg tokens)"),
            (("--concurrency",), "use the workload's profile (concurrency)"),
            (("--request-count", "--num-requests", "--warmup-request-count", "--num-warmup-requests",
              "--num-profile-runs"), "use the workload's runs field (runs x concurrency requests per point)"),
            (("--conversation-num", "--num-conversations", "--num-sessions", "--dataset-sampling-strategy",
              "--random-seed"), "every request has its own prompt, drawn with a seed of the run and point"),
            (("--output-artifact-dir", "--artifact-dir", "--profile-export-prefix", "--profile-export-file"),
             "sparkfleet reads the export it saves for each point"),
            (("--ui-type", "--ui"), "the client runs without a UI"))
    ABBREV = False

    @staticmethod
    def raw_name(point_name: str) -> str:
        """The point's AIPerf summary under the run's points/: its --artifact-dir keeps every export beside it
        (profile_export_aiperf.csv, profile_export.jsonl per request, inputs.json, phases/, logs/)."""
        return os.path.join(point_name + ".aiperf", "profile_export_aiperf.json")

    @staticmethod
    def refusals(workload: dict) -> list:
        """What of ``workload`` AIPerf cannot measure as sparkfleet's points name it: [(field, text)]. AIPerf has
        no context depth (llama-benchy's --depth: a context before each prompt, loaded apart when prefix_caching
        is on) and always sends unique prompts, so a depth above 0 and prefix_caching: true are refused."""
        profile = workload.get("profile") if isinstance(workload.get("profile"), dict) else {}
        depths = profile.get("depth", [0])
        depths = depths if isinstance(depths, list) else [depths]
        out = []
        if any(d not in (0, None) for d in depths):
            out.append(("profile", "profile.depth %s: client aiperf has no context depth (llama-benchy's --depth); "
                        "use depth [0], or client llama-benchy" % json.dumps(depths)))
        sla = workload.get("sla") if isinstance(workload.get("sla"), dict) else {}
        for name in sla_search.TARGETS:
            target = sla.get(name)
            q = target.get("percentile") if isinstance(target, dict) else None
            if q is not None and q not in AIPerf.PERCENTILES:
                out.append(("sla", "sla.%s.percentile %s: client aiperf exports the percentiles %s only; use one of "
                            "them, or client llama-benchy (any percentile of its per-request samples)" % (
                                name, q, ", ".join("%g" % p for p in AIPerf.PERCENTILES))))
        if workload.get("prefix_caching"):
            out.append(("prefix_caching", "prefix_caching: true measures a cached context (llama-benchy's "
                        "--enable-prefix-caching); client aiperf sends unique prompts only: use false, or client "
                        "llama-benchy"))
        return out

    @staticmethod
    def point_argv(client: str, point: dict, base_url: str, model_name: str, tokenizer: str, runs: int,
                   prefix_caching: bool, corpus_url, out_json: str, extra=None, skip_coherence: bool = False,
                   seed=None) -> list:
        """One ``aiperf profile`` per point, its exports under ``dirname(out_json)`` (raw_name).

        pp -> synthetic input tokens (stddev 0); tg -> output tokens (stddev 0) with ignore_eos and min_tokens, the
        server's own token counts read (--use-server-token-count), so every request decodes exactly tg tokens;
        concurrency -> --concurrency; runs -> --request-count runs x concurrency in one profile run (llama-benchy's
        --runs R sends R rounds of concurrency requests; AIPerf's --num-profile-runs would restart its services
        per run, and sparkfleet's iterations already give the CI over runs), after one round of warm-up requests.
        Unique prompts: one conversation per request, sampled in order (--conversation-num warm-up + measured,
        sequential), drawn with a seed of the run and the point; cache_prompt=false as llama-benchy --no-cache
        sends. ``corpus_url`` and ``skip_coherence`` are llama-benchy's: AIPerf draws from its own corpus and asks
        no question. Depth and prefix caching are refused before (refusals)."""
        conc, requests = int(point["concurrency"]), int(point["concurrency"]) * int(runs)
        key = "%s:%s" % (out_json if seed is None else seed, point.get("point"))
        point_seed = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % (2 ** 31)
        tok = tokenizer if os.path.isdir(tokenizer) or not tokenizer.endswith(".json") else os.path.dirname(tokenizer)
        argv = [str(client), "profile", "--url", base_url, "--model", model_name, "--tokenizer", tok,
                "--endpoint-type", "chat", "--streaming",
                "--synthetic-input-tokens-mean", str(point["pp"]), "--synthetic-input-tokens-stddev", "0",
                "--output-tokens-mean", str(point["tg"]), "--output-tokens-stddev", "0",
                "--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:%d" % int(point["tg"]),
                "--use-server-token-count", "--concurrency", str(conc), "--request-count", str(requests),
                "--warmup-request-count", str(conc), "--conversation-num", str(requests + conc),
                "--dataset-sampling-strategy", "sequential", "--random-seed", str(point_seed),
                "--no-server-metrics", "--artifact-dir", os.path.dirname(out_json), "--ui", "none",
                # a fresh connection per request: pooled, a request sent on a connection llama-server had just
                # closed after a streamed reply failed "Server disconnected" (on 9 of 24 points, 4 of which failed,
                # in tests/integration/test_aiperf_sla.py's first runs)
                "--connection-reuse-strategy", "never"]
        if not prefix_caching:
            argv += ["--extra-inputs", "cache_prompt:false"]
        return argv + [str(a) for a in (extra or [])]

    @staticmethod
    def parse_point(data: bytes, point=None, source: str = "aiperf output") -> dict:
        """{"metrics", "samples", "context_load", "version", "schema_version"} of one point from AIPerf's
        profile_export_aiperf.json (AIPERF_METRICS: each metric's ``avg``, in the unit named). ``samples`` is
        empty (one profile run per point: its per-request values stay in profile_export.jsonl).
        Raises ClientOutputError naming ``source`` for a file that is not an AIPerf export, a cancelled run,
        a metric in another unit, or, given ``point``, outputs that are not exactly its tg tokens."""
        try:
            doc = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClientOutputError("%s: not JSON (%s)" % (source, exc)) from None
        if not isinstance(doc, dict) or "schema_version" not in doc:
            raise ClientOutputError("%s: no schema_version (not AIPerf's profile_export_aiperf.json)" % source)
        if doc.get("was_cancelled") or doc.get("is_complete") is False:
            raise ClientOutputError("%s: AIPerf's run did not complete: %s" % (
                source, doc.get("incomplete_reason") or "cancelled"))
        metrics = {}
        for keys, unit, name in AIPERF_METRICS:
            found = [doc[k] for k in keys if isinstance(doc.get(k), dict)]
            if not found or found[0].get("avg") is None:
                continue
            value = found[0]
            if value.get("unit") != unit or not _number(value.get("avg")):
                raise ClientOutputError("%s: %s is not an average in %s: %r" % (source, keys[0], unit, value))
            metrics[name] = float(value["avg"])
        osl = doc.get("output_sequence_length")
        if point is not None and isinstance(osl, dict) and {osl.get("min"), osl.get("max")} != {point["tg"]}:
            raise ClientOutputError("%s: output lengths %s..%s tokens, not exactly tg %s" % (
                source, osl.get("min"), osl.get("max"), point["tg"]))
        return {"metrics": metrics, "samples": {}, "context_load": None, "version": doc.get("aiperf_version"),
                "schema_version": doc.get("schema_version")}

    #: The percentiles of profile_export_aiperf.json's metrics (``p50`` ...) within the sla's range (50..99.9).
    PERCENTILES = (50, 75, 90, 95, 99)
    #: The sla's targets -> AIPerf's metrics: TTFT, and inter-token latency as the time per output token.
    SLA_METRICS = {"ttft_ms": "time_to_first_token", "tpot_ms": "inter_token_latency"}

    @staticmethod
    def sla_latencies(entry: dict, run_dir: str, goals: dict) -> dict:
        """The point's latencies at the sla targets' percentiles from AIPerf's own export (the point's ``raw``,
        profile_export_aiperf.json): ``time_to_first_token`` and ``inter_token_latency`` ``pNN`` in ms. A value
        the export lacks is None (unread: the search stops there); so is an inter-token latency of 0, no latency but
        the client reading every token in one piece (a starved client): it would pass any target."""
        try:
            with open(os.path.join(run_dir, entry.get("raw") or ""), "rb") as fh:
                doc = json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError):
            doc = {}
        out = {}
        for name, goal in goals.items():
            metric = doc.get(AIPerf.SLA_METRICS[name]) if isinstance(doc, dict) else None
            value = metric.get("p%g" % goal["percentile"]) if isinstance(metric, dict) else None
            ok = _number(value) and (metric.get("unit") in (None, "ms")) and not (name == "tpot_ms" and value == 0)
            out[name] = float(value) if ok else None
        return out

    @staticmethod
    def coherence(random_weights: bool, extra) -> str:
        """What the run record says of the coherence check: AIPerf has none."""
        return "not asked: aiperf has no coherence check"

    @staticmethod
    def version(client: str, timeout_s: float = 120.0):
        """The client's version (``aiperf --version`` prints ``0.13.0``), or None."""
        return LlamaBenchy.version(client, timeout_s)


#: client name -> driver
DRIVERS = {LlamaBenchy.name: LlamaBenchy, AIPerf.name: AIPerf}


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
