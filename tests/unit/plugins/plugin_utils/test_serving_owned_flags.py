"""A serving workload's server_args or client_args may not set what sparkfleet sets on that command line (issue 33):
refused at validate, naming the workload, the flag and what sets it instead. Today's failure it prevents:
``server_args: [--port, '9000']`` accepted, then every run waiting out its 900 s ready timeout.

The flags are declared once, next to each command line (serving.ENGINES[...]["owns"], LlamaBenchy.OWNS); the last
tests pin that every flag those command lines carry is declared."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving, serving_client
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B",
         "gguf": "/var/lib/sparkfleet/models/qwen3-8b.gguf"}
BASE = {"name": "s", "models": [MODEL], "environments": ["native"], "iterations": 1}


def _problems(workload, **over) -> list[str]:
    try:
        resolve({**BASE, "workloads": [workload], **over})
    except CampaignError as err:
        return err.problems
    return []


def _serve(engine, **kw):
    return {"name": "serve-quick", "preset": "serve-quick", "engine": engine, **kw}


# engine, server_args, the flag named, what sets it instead (each engine's names: llama.cpp tools/server/README.md,
# vLLM cli_args.py + FlexibleArgumentParser, SGLang server_args.py, trtllm-serve commands/serve.py)
REFUSED = [
    ("llama.cpp", ["--port", "9000"], "--port", "use the workload's port field"),
    ("llama.cpp", ["--port=9000"], "--port (as '--port=9000')", "use the workload's port field"),
    ("llama.cpp", ["--host", "0.0.0.0"], "--host", "listens on 127.0.0.1 only"),
    ("llama.cpp", ["-m", "/x.gguf"], "-m", "the campaign's model"),
    ("llama.cpp", ["--model=/x.gguf"], "--model (as '--model=/x.gguf')", "the campaign's model"),
    ("llama.cpp", ["-hf", "ggml-org/x-GGUF"], "-hf", "the campaign's model"),
    ("llama.cpp", ["-a", "other"], "-a", "served_model_name field"),
    ("llama.cpp", ["--alias=other"], "--alias (as '--alias=other')", "served_model_name field"),
    ("vllm", ["--port", "9000"], "--port", "port field"),
    ("vllm", ["--port=9000"], "--port (as '--port=9000')", "port field"),
    ("vllm", ["--po", "9000"], "--port (as '--po')", "port field"),  # argparse takes the abbreviation
    ("vllm", ["--host", "0.0.0.0"], "--host", "127.0.0.1 only"),
    ("vllm", ["--uds", "/tmp/s.sock"], "--uds", "127.0.0.1 only"),
    ("vllm", ["--model", "other"], "--model", "the campaign's model"),
    ("vllm", ["--served-model-name", "x"], "--served-model-name", "served_model_name field"),
    ("vllm", ["--served_model_name=x"], "--served-model-name (as '--served_model_name=x')", "served_model_name"),
    ("sglang", ["--port", "9000"], "--port", "port field"),
    ("sglang", ["--port=9000"], "--port (as '--port=9000')", "port field"),
    ("sglang", ["--model-path", "/m"], "--model-path", "the campaign's model"),
    ("sglang", ["--model", "/m"], "--model-path (as '--model')", "the campaign's model"),
    ("sglang", ["--served-model-name", "x"], "--served-model-name", "served_model_name field"),
    ("sglang", ["--host=0.0.0.0"], "--host (as '--host=0.0.0.0')", "127.0.0.1 only"),
    ("trtllm-serve", ["--port", "9000"], "--port", "port field"),
    ("trtllm-serve", ["--port=9000"], "--port (as '--port=9000')", "port field"),
    ("trtllm-serve", ["--host", "0.0.0.0"], "--host", "127.0.0.1 only"),
]


@pytest.mark.parametrize("engine, args, flag, instead", REFUSED,
                         ids=[f"{e}:{' '.join(a)}" for e, a, _, _ in REFUSED])
def test_server_args_that_set_an_owned_flag_are_refused_naming_workload_flag_and_field(engine, args, flag, instead):
    (problem,) = _problems(_serve(engine, server_args=args))
    assert problem.startswith(f"campaign.workloads[0].server_args: workload serve-quick: server_args sets {flag}, "
                              f"which sparkfleet sets on the {engine} server's command line: ")
    assert instead in problem


def test_the_issues_case_reads_as_one_line():
    assert _problems(_serve("llama.cpp", server_args=["--port", "9000"])) == [
        "campaign.workloads[0].server_args: workload serve-quick: server_args sets --port, which sparkfleet sets on "
        "the llama.cpp server's command line: use the workload's port field"]


@pytest.mark.parametrize("engine, args", [
    ("llama.cpp", ["-c", "8192", "-np", "2", "-ngl", "0", "--flash-attn", "on", "-p", "hi"]),  # -p: --prompt
    ("vllm", ["--max-model-len", "4096", "--tensor-parallel-size", "1", "--model-impl", "auto"]),
    ("sglang", ["--tp", "1", "--mem-fraction-static", "0.8", "--tokenizer-path", "/t"]),
    ("trtllm-serve", ["--max_batch_size", "8", "--tokenizer", "/t"]),
])
def test_server_args_that_tune_the_engine_pass(engine, args):
    assert _problems(_serve(engine, server_args=args)) == []


CLIENT_REFUSED = [
    (["--depth", "0"], "--depth", "profile (depth)"),
    (["--depth=0"], "--depth (as '--depth=0')", "profile (depth)"),
    (["--concurrency", "8"], "--concurrency", "profile (concurrency)"),
    (["--concurrency=8"], "--concurrency (as '--concurrency=8')", "profile (concurrency)"),
    (["--conc", "8"], "--concurrency (as '--conc')", "profile (concurrency)"),  # argparse's abbreviation
    (["--pp", "128"], "--pp", "profile (pp)"),
    (["--tg=16"], "--tg (as '--tg=16')", "profile (tg"),
    (["--runs", "1"], "--runs", "runs field"),
    (["--format", "md"], "--format", "reads the JSON"),
    (["--save-result", "/tmp/x.json"], "--save-result", "reads the JSON"),
    (["--model", "x"], "--model", "served_model_name field"),
    (["--served-model-name", "x"], "--served-model-name", "served_model_name field"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url", "the server sparkfleet started"),
    (["--no-cache"], "--no-cache", "prefix_caching field"),
    (["--enable-prefix-caching"], "--enable-prefix-caching", "prefix_caching field"),
    (["--book-url", "http://x/b.txt"], "--book-url", "sparkfleet_serving_corpus"),
    (["--tokenizer", "/t"], "--tokenizer", "the model's tokenizer field"),
    (["--latency-mode", "generation"], "--latency-mode", "api latency mode"),
]


@pytest.mark.parametrize("args, flag, instead", CLIENT_REFUSED, ids=[" ".join(a) for a, _, _ in CLIENT_REFUSED])
def test_client_args_that_set_what_sparkfleet_sets_are_refused(args, flag, instead):
    (problem,) = _problems(_serve("vllm", client_args=args))
    assert problem.startswith(f"campaign.workloads[0].client_args: workload serve-quick: client_args sets {flag}, "
                              "which sparkfleet sets on llama-benchy's command line: ")
    assert instead in problem


def test_client_args_sparkfleet_leaves_to_the_user_pass():
    assert _problems(_serve("vllm", client_args=["--skip-coherence", "--no-warmup", "--adapt-prompt",
                                                 "--extra-body", "a=1"])) == []


def test_a_crossed_workload_names_each_engine_once_and_its_client_args_once():
    found = _problems({"name": "w", "preset": "serve-quick", "server_args": ["--host", "0.0.0.0"],
                       "client_args": ["--depth", "0"]}, factors={"engine": ["vllm", "sglang"]})
    assert sorted(found) == sorted([
        "campaign.workloads[0].server_args: workload w.vllm: server_args sets --host, which sparkfleet sets on the "
        "vllm server's command line: the server listens on 127.0.0.1 only, where the client on the host reaches it",
        "campaign.workloads[0].server_args: workload w.sglang: server_args sets --host, which sparkfleet sets on the "
        "sglang server's command line: the server listens on 127.0.0.1 only, where the client on the host reaches it",
        "campaign.workloads[0].client_args: workload w: client_args sets --depth, which sparkfleet sets on "
        "llama-benchy's command line: use the workload's profile (depth)"])


def test_a_campaign_engines_flags_are_those_its_command_gives_a_placeholder():
    engines = {"mine": {"command": ["my-server", "--weights", "{model}", "--bind", "{host}:{port}",
                                    "--name={served_model_name}", "--threads", "4"]}}
    workload = {"name": "w", "preset": "serve-quick", "engine": "mine",
                "server_args": ["--bind", "0.0.0.0:1", "--name=x", "--threads", "8"]}
    found = _problems(workload, engines=engines)
    assert [p.split(": ", 2)[2].split(",")[0] for p in found] == ["server_args sets --bind",
                                                                  "server_args sets --name (as '--name=x')"]
    assert "use the workload's port field" in found[0] and "served_model_name field" in found[1]


# ------------------------------------------------------------------------------------ one home, pinned


def _flags(argv) -> set:
    return {str(a).split("=", 1)[0] for a in argv if str(a).startswith("-") and not str(a).lstrip("-").isdigit()}


#: sparkfleet's defaults that server_args may replace (the argv builder leaves them out when given).
TUNABLE = {"llama.cpp": {"-c", "-np", "-ngl"}}


@pytest.mark.parametrize("engine", settings.SERVING_ENGINES)
def test_every_flag_on_an_engines_command_line_is_declared_owned_or_tunable(engine):
    workload = {"name": "w", "engine": engine, "profile": {"depth": [0], "concurrency": [1], "pp": [8], "tg": [8]}}
    model = {**MODEL, "path": MODEL["gguf"]} if engine == "llama.cpp" else MODEL
    owned = {flag for flags, _ in serving.ENGINES[engine]["owns"] for flag in flags}
    argv = serving.server_argv(workload, model)
    argv = argv[argv.index("sglang.launch_server") + 1:] if engine == "sglang" else argv  # python3's -m is not its
    assert _flags(argv) - owned == TUNABLE.get(engine, set())
    for flag in owned:  # and each is refused, whatever the engine's parser
        assert serving.owned_flag(flag, serving.ENGINES[engine]["owns"], serving.ENGINES[engine]["abbrev"])


def test_every_flag_on_llama_benchys_command_line_is_declared():
    drv = serving_client.LlamaBenchy
    owned = {flag for flags, _ in drv.OWNS for flag in flags}
    for prefix_caching, corpus in ((False, None), (True, "http://127.0.0.1:1/corpus.txt")):
        argv = drv.point_argv("llama-benchy", {"depth": 0, "concurrency": 1, "pp": 8, "tg": 8},
                              "http://127.0.0.1:8080/v1", "m", "/t", 3, prefix_caching, corpus, "/o.json")
        assert _flags(argv) <= owned, _flags(argv) - owned
