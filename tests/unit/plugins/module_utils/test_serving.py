"""Serving runs (issue 25): engine server argv per engine, profile points and their seeded order, the container's
network, and a real server process's life (bounded readiness wait, fail fast, always stopped, group gone)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _ansible_modules import host_util

serving = host_util("serving")

GGUF = {"name": "tiny", "path": "/models/tiny.gguf", "tokenizer": "/models/tokenizer.json"}
HF = {"name": "qwen", "path": "/models/qwen", "hf_id": "Qwen/Qwen3-0.6B"}
PROFILE = {"depth": [0, 4096], "concurrency": [1, 4], "pp": [512], "tg": [64]}


def _wl(engine, **kw):
    return {"name": "serve", "engine": engine, "profile": PROFILE, **kw}


# ------------------------------------------------------------------------------------------- argv


def test_llamacpp_sizes_its_slots_for_the_largest_point():
    argv = serving.server_argv(_wl("llama.cpp", server_args=["--flash-attn", "on"]), GGUF)
    assert argv[:7] == ["llama-server", "-m", "/models/tiny.gguf", "--host", "127.0.0.1", "--port", "8080"]
    # 4 slots (the highest concurrency), each holding the deepest point: 4096 + 512 + 64 + the margin
    assert argv[argv.index("-np") + 1] == "4"
    assert argv[argv.index("-c") + 1] == str(4 * (4096 + 512 + 64 + serving.LLAMACPP_SLOT_MARGIN))
    assert argv[argv.index("--alias") + 1] == "tiny"
    assert argv[-2:] == ["--flash-attn", "on"]  # the workload's server_args last


def test_server_args_that_set_a_generated_flag_replace_it():
    argv = serving.server_argv(_wl("llama.cpp", server_args=["--ctx-size=8192", "--parallel", "2", "-ngl", "0"]),
                               GGUF)
    assert "-c" not in argv and "-np" not in argv and argv.count("-ngl") == 1
    assert argv[-4:] == ["--parallel", "2", "-ngl", "0"]


@pytest.mark.parametrize("engine, head", [
    ("vllm", ["vllm", "serve", "/models/qwen", "--host", "127.0.0.1", "--port", "8000",
              "--served-model-name", "qwen"]),
    ("sglang", ["python3", "-m", "sglang.launch_server", "--model-path", "/models/qwen", "--host", "127.0.0.1",
                "--port", "30000", "--served-model-name", "qwen"]),
    ("trtllm-serve", ["trtllm-serve", "/models/qwen", "--host", "127.0.0.1", "--port", "8000"]),
])
def test_each_engine_listens_on_loopback_with_its_default_port(engine, head):
    argv = serving.server_argv(_wl(engine, server_args=["--x", "y z"]), HF)
    assert argv == head + ["--x", "y z"]
    assert serving.ready_url(_wl(engine)) == f"http://127.0.0.1:{head[head.index('--port') + 1]}/health"


def test_port_and_served_name_come_from_the_workload():
    wl = _wl("vllm", port=9123, served_model_name="alias")
    argv = serving.server_argv(wl, HF)
    assert argv[argv.index("--port") + 1] == "9123" and argv[argv.index("--served-model-name") + 1] == "alias"
    assert serving.base_url(wl) == "http://127.0.0.1:9123/v1"


def test_trtllm_serve_answers_as_the_directory_name(tmp_path):
    model = tmp_path / "Llama-3.1-8B"
    model.mkdir()
    assert serving.served_name(_wl("trtllm-serve"), {"name": "llama", "path": str(model) + "/"}) == "Llama-3.1-8B"


@pytest.mark.parametrize("workload, model, message", [
    (_wl("llama.cpp"), HF, "llama.cpp serves a .gguf file"),
    (_wl("vllm", port=0), HF, "port 0 is not a TCP port"),
    (_wl("tgi"), HF, "engine 'tgi' is not a serving engine"),
])
def test_bad_server_settings_are_named(workload, model, message):
    with pytest.raises(serving.ServingError, match=message):
        serving.server_argv(workload, model)


def test_tokenizer_defaults_to_a_model_directory(tmp_path):
    assert serving.tokenizer(GGUF) == "/models/tokenizer.json"
    assert serving.tokenizer_choice(GGUF)["source"] == "the model's tokenizer"
    assert serving.tokenizer_choice({"name": "d", "path": str(tmp_path)}) == {"path": str(tmp_path),
                                                                              "source": "the model's directory"}
    with pytest.raises(serving.ServingError, match=r"model x: no tokenizer for the serving client: its GGUF "
                                                   r"/nowhere/x.gguf cannot be read \(No such file or directory\); "
                                                   r"set the model's tokenizer"):
        serving.tokenizer({"name": "x", "path": "/nowhere/x.gguf"}, "/cache")
    with pytest.raises(serving.ServingError, match=r"model h: no tokenizer for the serving client \(no tokenizer, "
                                                   r"and its path None is neither a directory nor a .gguf file\)"):
        serving.tokenizer({"name": "h", "hf_id": "Q/q", "path": None})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tinymodel import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _gguf_alone(tiny, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tiny.gguf").write_bytes(tiny["gguf"].read_bytes())
    return directory / "tiny.gguf"


def test_a_gguf_without_a_tokenizer_gets_one_derived_from_its_vocabulary_once(tiny, tmp_path):
    gguf = _gguf_alone(tiny, tmp_path / "models")
    cache = tmp_path / "results" / serving.TOKENIZER_CACHE
    first = serving.tokenizer_choice({"name": "tiny", "path": str(gguf)}, str(cache))
    assert first["source"] == "derived from the GGUF's vocabulary" and first["derived"] is True
    assert first["path"] == str(cache / first["key"]) and first["gguf"] == str(gguf) and first["tokens"] == 1024
    again = serving.tokenizer_choice({"name": "tiny", "path": str(gguf)}, str(cache))
    assert again["derived"] is False and again["path"] == first["path"]
    # a llama.cpp run of a model given by its gguf alone, and a .gguf given as the tokenizer: the same
    assert serving.tokenizer({"name": "tiny", "gguf": str(gguf), "path": None}, str(cache)) == first["path"]
    assert serving.tokenizer({"name": "tiny", "path": "/x/y.gguf", "tokenizer": str(gguf)}, str(cache)) == first["path"]
    from tokenizers import Tokenizer

    text = tiny["tokenizer"].parent.joinpath("tokenizer.json")
    ids = Tokenizer.from_file(first["path"] + "/tokenizer.json").encode("Call me Ishmael.").ids
    assert ids == Tokenizer.from_file(str(text)).encode("Call me Ishmael.").ids


def test_the_tokenizer_json_beside_a_gguf_is_taken_when_it_is_the_ggufs(tiny, tmp_path):
    gguf = _gguf_alone(tiny, tmp_path / "models")
    (gguf.parent / "tokenizer.json").write_bytes(tiny["tokenizer"].read_bytes())
    cache = tmp_path / "cache"
    choice = serving.tokenizer_choice({"name": "tiny", "path": str(gguf)}, str(cache))
    assert choice == {"path": str(gguf.parent), "source": "the tokenizer.json beside the GGUF", "gguf": str(gguf),
                      "tokens": 1024}
    assert not cache.exists()  # nothing derived
    # another model's tokenizer.json beside it (another vocabulary size) is not taken
    (gguf.parent / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    choice = serving.tokenizer_choice({"name": "tiny", "path": str(gguf)}, str(cache))
    assert choice["source"] == "derived from the GGUF's vocabulary" and choice["path"].startswith(str(cache))


def test_a_gguf_whose_vocabulary_cannot_be_derived_names_what_to_set(tiny, tmp_path, monkeypatch):
    gt = host_util("gguf_tokenizer")
    gguf = _gguf_alone(tiny, tmp_path / "models")
    monkeypatch.setattr(gt, "PRE_TOKENIZERS", {})  # as if its pre-tokenizer were a new one
    with pytest.raises(serving.ServingError) as err:
        serving.tokenizer({"name": "tiny", "path": str(gguf)}, str(tmp_path / "cache"))
    assert str(err.value) == (f"model tiny: no tokenizer for the serving client: none can be derived from its GGUF "
                              f"{gguf}: its pre-tokenizer 'gpt-2' is not one sparkfleet can reproduce (known: ); set "
                              f"the model's tokenizer (a tokenizer.json, or a directory holding one, on the host)")
    # a tokenizer.json beside it, even of another size, is then the one there is, and the record says why
    (gguf.parent / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    choice = serving.tokenizer_choice({"name": "tiny", "path": str(gguf)}, str(tmp_path / "cache"))
    assert choice["source"] == "the tokenizer.json beside the GGUF" and "cannot be derived" in choice["note"]


def test_the_plan_shows_a_ggufs_tokenizer_as_the_host_decides_it():
    assert serving.tokenizer_shown(GGUF) == "/models/tokenizer.json"
    assert serving.tokenizer_shown({"name": "t", "path": "/m/t.gguf"}) == "<tokenizer of /m/t.gguf>"
    assert serving.tokenizer_shown(HF) == "/models/qwen"


@pytest.mark.parametrize("flags, expected, info", [
    (["--gpus", "all"], ["--gpus", "all", "--network", "host"], {"network": "host", "network_added": True}),
    (["--network=bridge"], ["--network=bridge"], {"network": "bridge", "network_added": False}),
    (["--net", "host", "--ipc=host"], ["--net", "host", "--ipc=host"], {"network": "host", "network_added": False}),
])
def test_a_container_gets_the_host_network_unless_it_picked_one(flags, expected, info):
    assert serving.with_host_network(flags) == (expected, info)


# ---------------------------------------------------------------------------------------- profile


def test_profile_points_cross_the_levels_and_are_named():
    points = serving.profile_points(_wl("llama.cpp"))
    assert [p["point"] for p in points] == ["d0.c1.pp512.tg64", "d0.c4.pp512.tg64", "d4096.c1.pp512.tg64",
                                            "d4096.c4.pp512.tg64"]
    assert points[3] == {"depth": 4096, "concurrency": 4, "pp": 512, "tg": 64, "point": "d4096.c4.pp512.tg64"}


@pytest.mark.parametrize("levels, name", [
    ((4096, 2, 512, 64), "d4096.c2.pp512.tg64"),
    ((4096.0, 2.0, 512.0, 64.0), "d4096.c2.pp512.tg64"),  # a float column of pandas
    ((float("nan"), 2, 512, 64), "dnan.c2.pp512.tg64"),  # as the report's f-string wrote it
    ((0.5, 2, 512, 64), "d0.5.c2.pp512.tg64"),
])
def test_one_point_name_for_the_host_and_the_report(levels, name):
    assert serving.point_name(*levels) == name


@pytest.mark.parametrize("profile, message", [
    (None, "needs a profile mapping"),
    ({**PROFILE, "depth": []}, "profile.depth must be a non-empty list"),
    ({**PROFILE, "concurrency": [0]}, r"profile.concurrency\[0\]: must be between 1 and 4096 requests, got 0"),
    ({**PROFILE, "concurrency": [1, 5000]}, r"profile.concurrency\[1\]: must be between 1 and 4096 requests"),
    ({**PROFILE, "tg": ["64"]}, r"profile.tg\[0\]: must be an integer, got a string '64'"),
    ({**PROFILE, "depth": [True]}, r"profile.depth\[0\]: must be an integer, got a boolean True"),
])
def test_a_malformed_profile_is_refused(profile, message):
    with pytest.raises(ValueError, match=message):
        serving.profile_points({"name": "w", "engine": "vllm", "profile": profile})


def test_the_point_order_is_shuffled_with_a_seed_from_the_run_id():
    wl = _wl("llama.cpp", profile={"depth": [0, 1, 2, 3], "concurrency": [1, 2], "pp": [8], "tg": [4]})
    first, seed = serving.shuffled_points(wl, "tiny.bare.serve.i001.0123456789")
    again, seed_again = serving.shuffled_points(wl, "tiny.bare.serve.i001.0123456789")
    other, other_seed = serving.shuffled_points(wl, "tiny.bare.serve.i002.9876543210")
    assert seed == seed_again and first == again  # a resume runs them in the same order
    assert other_seed != seed and [p["point"] for p in other] != [p["point"] for p in first]
    assert sorted(p["point"] for p in first) == sorted(p["point"] for p in serving.profile_points(wl))
    assert [p["order"] for p in first] == list(range(8))
    assert [p["point"] for p in first] != [p["point"] for p in serving.profile_points(wl)]  # not the plain order
    assert serving.order_seed("c1__h1__m__bare__serve__i001") == 3693241652  # sha256(...)[:8], computed once


# ---------------------------------------------------------------------------------------- process

# A stand-in engine server: answers GET /health 503 until `delay` seconds after start, then 200; with a child
# in its process group (an engine's worker) whose pid it writes to `pidfile`. Mode "exit": prints a line and
# exits 3 at once; mode "stubborn": ignores SIGTERM.
SERVER = textwrap.dedent("""
    import http.server, os, signal, subprocess, sys, time
    port, delay, pidfile, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    if mode == "exit":
        print("error: failed to load model '/models/missing.gguf'", flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    worker = subprocess.Popen(["sleep", "300"])
    with open(pidfile, "w") as fh:
        fh.write("%d %d" % (os.getpid(), worker.pid))
    start = time.monotonic()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ready = self.path == "/health" and time.monotonic() - start >= delay
            self.send_response(200 if ready else 503)
            self.end_headers()
            self.wfile.write(b'{"status":"ok"}' if ready else b'{"error":"Loading model"}')
        def log_message(self, *a):
            pass
    print("listening on 127.0.0.1:%d" % port, flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _pids(pidfile, within_s=30.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = Path(pidfile).read_text() if os.path.exists(pidfile) else ""
        if text.strip():
            return [int(p) for p in text.split()]
        time.sleep(0.05)
    raise AssertionError("the stand-in server never wrote its pids")


def _server(tmp_path, delay=0.0, mode="serve", **kw):
    port = _free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    pidfile = str(tmp_path / "pids")
    argv = [sys.executable, str(script), str(port), str(delay), pidfile, mode]
    url = f"http://127.0.0.1:{port}/health"
    return serving.ServerProcess(argv, str(tmp_path / "server.log"), url, **kw), pidfile


def test_the_server_is_waited_for_then_stopped_with_its_whole_group(tmp_path):
    started = []
    server, pidfile = _server(tmp_path, delay=1.0, on_start=started.append)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as the job holds it while the server starts
    try:
        server.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        ready_s = server.wait_ready(60)
        leader, worker = _pids(pidfile)
        assert ready_s >= 1.0 and started == [server.proc] and _alive(worker)
        blocked = int(Path(f"/proc/{leader}/status").read_text().split("SigBlk:")[1].split()[0], 16)
        assert not blocked & (1 << (signal.SIGTERM - 1))  # started while the job held SIGTERM, yet it hears it
    finally:
        server.stop()
    assert server.stopped == "terminated" and server.exit_code == -signal.SIGTERM
    assert not _alive(leader) and not _alive(worker)  # the engine's worker went with it
    assert "listening on 127.0.0.1" in (tmp_path / "server.log").read_text()


#: A launcher as mpirun is: it ignores SIGTERM (stuck), and starts its rank in a process group of its own, in its
#: session; it writes the rank's pid.
LAUNCHER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
open(sys.argv[1], "w").write(str(rank.pid))
time.sleep(600)
"""


def test_a_killed_launcher_takes_the_ranks_of_its_session_with_it(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    pidfile = str(tmp_path / "rank")
    server = serving.ServerProcess([sys.executable, str(script), pidfile], str(tmp_path / "server.log"),
                                   "http://127.0.0.1:9/health", grace_s=0.5)
    server.start()
    try:
        rank = _pids(pidfile)[0]
        assert os.getpgid(rank) == rank != server.proc.pid and os.getsid(rank) == server.proc.pid
    finally:
        server.stop()
    assert server.stopped == "killed" and not _alive(rank)


def test_a_groups_live_members_are_read_from_proc_zombies_left_out(tmp_path):
    def stat(pid, comm, state, pgrp, session=None):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} ({comm}) {state} 1 {pgrp} {session or pgrp} 0 -1 4194560 0 0\n")

    stat(10, "llama-server", "S", 10)
    stat(11, "worker ) R 1 10", "D", 10)  # a comm that looks like fields: the last ")" ends it
    stat(12, "exited", "Z", 10)
    stat(13, "other", "R", 99)
    stat(14, "rank0", "S", 14, session=10)  # mpirun's rank: a group of its own in the server's session
    (tmp_path / "self").mkdir()
    assert sorted(serving.group_members(10, proc_root=str(tmp_path))) == [10, 11, 14]
    assert serving.group_members(98, proc_root=str(tmp_path)) == []


def test_the_ready_wait_is_bounded(tmp_path):
    server, pidfile = _server(tmp_path, delay=3600)  # answers 503 "Loading model" for an hour
    began = time.monotonic()
    with server, pytest.raises(serving.ServingError, match=r"not ready after 1 s \(.*answered HTTP 503\)"):
        server.wait_ready(1.0)
    assert time.monotonic() - began < 120  # bounded by the timeout (plus the stop's grace), not by the server
    assert not any(_alive(p) for p in _pids(pidfile))


def test_a_server_that_exits_early_fails_fast_with_its_log(tmp_path):
    server, _ = _server(tmp_path, mode="exit")
    with server, pytest.raises(serving.ServingError) as err:
        server.wait_ready(3600)
    assert "server exited with code 3 before it was ready" in str(err.value)
    assert "failed to load model '/models/missing.gguf'" in str(err.value)
    assert server.stopped == "exited" and server.exit_code == 3


class Stop(BaseException):
    """Stands for matrix_run.JobStopped (a BaseException raised by the SIGTERM handler)."""


def test_the_server_is_stopped_when_the_waiting_thread_is_interrupted(tmp_path):
    server, pidfile = _server(tmp_path, delay=3600)
    previous = signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(Stop("stopped by signal 15")))
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        with pytest.raises(Stop), server:
            server.wait_ready(3600)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert server.stopped == "terminated"
    assert not any(_alive(p) for p in _pids(pidfile))


def test_an_exception_in_the_block_stops_the_server(tmp_path):
    server, pidfile = _server(tmp_path)
    with pytest.raises(RuntimeError, match="client blew up"), server:
        server.wait_ready(60)
        raise RuntimeError("client blew up")
    assert not any(_alive(p) for p in _pids(pidfile))


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    server, pidfile = _server(tmp_path, mode="stubborn", grace_s=0.5)
    with server:
        server.wait_ready(60)
    assert server.stopped == "killed" and server.exit_code == -signal.SIGKILL
    assert not any(_alive(p) for p in _pids(pidfile))


def test_a_failing_on_start_still_stops_the_server(tmp_path):
    def boom(proc):
        raise OSError("job registry unwritable")

    server, pidfile = _server(tmp_path, on_start=boom)
    with pytest.raises(OSError, match="registry unwritable"), server:
        pass
    assert server.stopped in ("terminated", "exited") and not _alive(server.proc.pid)


# ------------------------------------------------------------------------------------ a whole run
# bench_run runs a serving workload in a bare environment: a stand-in llama-server (answers /health and
# /v1/models, writes its pid, logs a KV line) and a stand-in llama-benchy (checks the server answers, writes
# llama-benchy's JSON shape for the point it was given, and fails the point d4096.c4 on purpose).

FAKE_SERVER = textwrap.dedent("""\
    #!{python}
    import http.server, os, sys
    args = sys.argv[1:]
    if args == ["--version"]:  # as llama-server: common/arg.cpp --version, build-info.cpp.in's lines on stderr, exit 0
        sys.stderr.write("version: 0.5.0-dev (build 1, commit 0c1e570)\\nbuilt with GNU 12.2.0 for Linux x86_64\\n")
        sys.exit(0)
    port = int(args[args.index("--port") + 1])
    with open(os.environ["FAKE_SERVER_PIDS"], "a") as fh:
        fh.write("%d\\n" % os.getpid())
    if os.environ.get("FAKE_SERVER_FAIL"):
        print("error: unable to load model", flush=True)
        sys.exit(1)
    print("llama_kv_cache:      CUDA0 KV buffer size =  1536.00 MiB", flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            meta = os.environ.get("FAKE_SERVER_META")  # /v1/models' model meta (tools/server model_meta)
            self.wfile.write(('{{"data": [{{"id": "tiny"%s}}]}}' % (', "meta": ' + meta if meta else "")).encode())
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

FAKE_CLIENT = textwrap.dedent("""\
    #!{python}
    import json, os, sys, urllib.request
    args = sys.argv[1:]
    if args == ["--version"]:
        print("llama-benchy 0.4.0")
        sys.exit(0)
    get = lambda flag: args[args.index(flag) + 1]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
    opener.open(get("--base-url") + "/models", timeout=10).read()
    print("HOME=" + os.environ["HOME"], "offline=" + os.environ.get("HF_HUB_OFFLINE", ""))
    depth, conc = int(get("--depth")), int(get("--concurrency"))
    if (depth, conc) == (4096, 4):
        print("Error: boom")
        sys.exit(1)
    metric = lambda v: {{"mean": v, "std": 0.0, "values": [v, v]}}
    entry = {{"concurrency": conc, "context_size": depth, "prompt_size": int(get("--pp")),
             "response_size": int(get("--tg")), "is_context_prefill_phase": False,
             "pp_throughput": metric(1000.0 + depth), "pp_req_throughput": metric(500.0),
             "tg_throughput": metric(40.0 * conc), "tg_req_throughput": metric(40.0),
             "peak_throughput": metric(45.0 * conc), "peak_req_throughput": None,
             "ttfr": metric(12.5), "est_ppt": metric(10.0), "e2e_ttft": metric(13.0)}}
    with open(get("--save-result"), "w") as fh:
        json.dump({{"version": "0.4.0", "benchmarks": [entry]}}, fh)
""")


def _executable(path: Path, text: str) -> str:
    path.write_text(text.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


def _serving_run(tmp_path, monkeypatch, fail_server=False, **workload_over):
    from _ansible_modules import STANDINS, load_module, run_module

    record = host_util("record")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _executable(bindir / "llama-server", FAKE_SERVER)
    client = _executable(tmp_path / "llama-benchy", FAKE_CLIENT)
    path = f"{bindir}:{STANDINS}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    (tmp_path / "tokenizer.json").write_text("{}")
    model = {"name": "tiny", "path": str(tmp_path / "tiny.gguf"), "tokenizer": str(tmp_path / "tokenizer.json")}
    workload = {"name": "serve", "engine": "llama.cpp", "profile": PROFILE, "runs": 2, "port": _free_port(),
                "ready_timeout_s": 60, **workload_over}
    rid = record.run_id("c1", "h1", "tiny", "bare", "serve", 1)
    env = {"PATH": path, "FAKE_SERVER_PIDS": str(tmp_path / "server.pids")}
    if fail_server:
        env["FAKE_SERVER_FAIL"] = "1"
    args = {"runs": [{"run_id": rid, "order_index": 0, "model": model, "environment": {"name": "bare", "kind": "bare"},
                      "workload": workload, "iteration": 1, "warmup": False}],
            "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 300, "telemetry_interval_s": 0.1, "env": env,
            "serving": {"client": client}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert record.validate(rec) == []
    pids = [int(p) for p in (tmp_path / "server.pids").read_text().split()]
    assert pids and not any(_alive(p) for p in pids)  # no server outlives its run
    return rec, Path(out["runs"][0]["record_path"]).parent


def test_a_serving_run_drives_every_point_and_records_them(tmp_path, monkeypatch):
    rec, run_dir = _serving_run(tmp_path, monkeypatch)
    section = rec["serving"]
    assert rec["status"] == "ok" and rec["reason"].startswith("1 of 4 points failed: d4096.c4.pp512.tg64: client "
                                                              "exited 1")
    assert section["engine"] == "llama.cpp" and section["point_order_seed"] == serving.order_seed(rec["run_id"])
    assert [p["order"] for p in section["points"]] == [0, 1, 2, 3]
    expected = [p["point"] for p in serving.shuffled_points({"profile": PROFILE}, rec["run_id"])[0]]
    assert [p["point"] for p in section["points"]] == expected  # run in the seeded order
    ok = {p["point"]: p for p in section["points"] if p["status"] == "ok"}
    assert sorted(ok) == ["d0.c1.pp512.tg64", "d0.c4.pp512.tg64", "d4096.c1.pp512.tg64"]
    point = ok["d0.c4.pp512.tg64"]
    assert point["metrics"] == {"pp_tok_s": 1000.0, "pp_req_tok_s": 500.0, "tg_tok_s": 160.0, "tg_req_tok_s": 40.0,
                                "peak_tg_tok_s": 180.0, "ttfr_ms": 12.5, "est_ppt_ms": 10.0, "e2e_ttft_ms": 13.0}
    assert point["samples"]["tg_tok_s"] == [160.0, 160.0] and point["raw"] == "points/d0.c4.pp512.tg64.json"
    assert (run_dir / point["raw"]).exists() and point["duration_s"] > 0
    server = section["server"]
    assert server["stopped"] == "terminated" and server["port"] > 0 and server["ready_s"] >= 0
    assert server["argv"][0] == "llama-server" and "--network" not in server  # bare: no container network
    assert section["client"]["name"] == "llama-benchy" and section["client"]["version"] == "0.4.0"
    assert "--exact-tg" in section["client"]["argv"] and "--no-cache" in section["client"]["argv"]
    assert "kv_cache_gib" in section["kv"] or "error" in section["kv"]  # the KV parser is another piece
    bench_log = (run_dir / "bench.log").read_text()
    assert f"HOME={run_dir}/.client-home offline=1" in bench_log and "Error: boom" in bench_log
    assert not (run_dir / ".client-home").exists()  # the client's cache goes with the run
    assert "CUDA0 KV buffer size" in (run_dir / "server.log").read_text()
    assert rec["command"][:3] == ["/usr/bin/env", "-C", str(run_dir)] and rec["telemetry"]["samples"] >= 1
    # issue 35: the engine's version from its own --version, in the run's environment before the server
    version = section["engine_version"]
    assert rec["engine_version"] == version["version"] == "0.5.0-dev (build 1, commit 0c1e570)"
    assert (version["build"], version["commit"], version["source"]) == (1, "0c1e570", "llama-server --version")
    assert version["argv"] == ["llama-server", "--version"] and (run_dir / "version.log").exists()
    # the 4-byte "GGUF" here is no GGUF: the weights have no card, the run stays ok and unconfirmed, saying why
    assert rec["provenance"]["status"] == "unconfirmed" and "no model directory to compare with" in \
        rec["provenance"]["reason"] and "provenance unconfirmed: " in rec["reason"]


def test_a_bare_run_needs_no_test_only_setting(tiny, tmp_path, monkeypatch):
    """Issue 33: a bare serving run with nothing but the model's GGUF and random_weights: llama-server found on
    the login shell's PATH (the module's own PATH lacks it, as Ansible's minimal one does), the client's tokenizer
    derived from the GGUF, the coherence check skipped for the random weights, and the record saying all three."""
    from _ansible_modules import STANDINS, load_module, run_module

    record = host_util("record")
    runexec = host_util("runexec")
    engines = tmp_path / "opt" / "engines" / "bin"
    engines.mkdir(parents=True)
    _executable(engines / "llama-server", FAKE_SERVER)
    client = _executable(tmp_path / "llama-benchy", FAKE_CLIENT)
    shell = tmp_path / "login-shell"  # the user's login shell: its profile puts the engines on PATH
    shell.write_text(f"#!/bin/sh\necho Welcome\nPATH={engines}:/usr/bin:/bin; export PATH\nexec /bin/sh -c \"$3\"\n")
    shell.chmod(0o755)
    monkeypatch.setattr(runexec.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_shell=str(shell)))
    monkeypatch.setattr(runexec, "_LOGIN_PATHS", {})
    monkeypatch.setenv("PATH", f"{STANDINS}:/usr/bin:/bin")
    gguf = _gguf_alone(tiny, tmp_path / "models")
    model = {"name": "tiny", "path": str(gguf), "random_weights": True}
    profile = {"depth": [0], "concurrency": [1], "pp": [64], "tg": [8]}
    workload = {"name": "serve", "engine": "llama.cpp", "profile": profile, "runs": 2, "port": _free_port(),
                "ready_timeout_s": 60}
    rid = record.run_id("c1", "h1", "tiny", "bare", "serve", 1)
    results = tmp_path / "results"
    args = {"runs": [{"run_id": rid, "order_index": 0, "model": model, "environment": {"name": "bare", "kind": "bare"},
                      "workload": workload, "iteration": 1, "warmup": False}],
            "campaign": "c1", "host": "h1", "results_root": str(results), "cooldown": {"enabled": False},
            "timeout_s": 300, "telemetry_interval_s": 0.1, "env": {"FAKE_SERVER_PIDS": str(tmp_path / "pids")},
            "serving": {"client": client, "corpus": str(tinymodel_corpus())}, "readiness": {"probe_s": 0}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert record.validate(rec) == [] and rec["status"] == "ok", rec["reason"]
    section = rec["serving"]
    assert section["server"]["executable"] == str(engines / "llama-server")
    assert f"PATH={engines}:/usr/bin:/bin:{STANDINS}:" in " ".join(rec["command"])
    tokenizer = section["tokenizer"]
    assert tokenizer["source"] == "derived from the GGUF's vocabulary" and tokenizer["gguf"] == str(gguf)
    assert tokenizer["path"].startswith(str(results / serving.TOKENIZER_CACHE)) and tokenizer["tokens"] == 1024
    argv = section["client"]["argv"]
    assert argv[argv.index("--tokenizer") + 1] == tokenizer["path"] and "--skip-coherence" in argv
    assert section["client"]["coherence_check"] == "skipped: the model has random_weights"
    assert section["random_weights"] is True and section["corpus"] == str(tinymodel_corpus())
    assert "--book-url" in argv

    # without the engine on any PATH the run fails at setup, naming it and where it looked
    (engines / "llama-server").unlink()
    monkeypatch.setattr(runexec, "_LOGIN_PATHS", {})
    args["runs"][0]["run_id"] = rid = record.run_id("c1", "h1", "tiny", "bare", "serve", 2)
    args["runs"][0]["iteration"] = 2
    out = run_module(load_module("bench_run"), args)
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert rec["status"] == "failed" and "bare run: llama-server not found on the host's PATH" in rec["reason"]
    assert str(engines) in rec["reason"]


def tinymodel_corpus() -> Path:
    from tinymodel import CORPUS

    return CORPUS


def test_a_server_that_never_comes_up_fails_the_run_naming_its_log(tmp_path, monkeypatch):
    rec, _ = _serving_run(tmp_path, monkeypatch, fail_server=True)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("server exited with code 1 before it was ready: error: unable to load model")
    assert rec["serving"]["points"] == [] and rec["serving"]["server"]["stopped"] == "exited"
    assert rec["exit_code"] == 1


# ------------------------------------------------------------------- a campaign's own engine (engine_spec)

CUSTOM = {"command": ["my-server", "--weights", "{model}", "--bind", "{host}:{port}", "--name={served_model_name}"],
          "ready_path": "/v1/models", "port": 9000, "served_model_name_default": None, "kv_log": None}


def _custom(spec=None, **kw):
    return _wl("my-engine", engine_spec=dict(CUSTOM, **(spec or {})), **kw)


def test_a_custom_engines_argv_is_its_command_expanded_then_the_server_args():
    workload = _custom(server_args=["--threads", "4"])
    assert serving.is_serving(workload) and not serving.is_serving(_wl("my-engine"))
    assert serving.server_argv(workload, HF) == ["my-server", "--weights", "/models/qwen", "--bind", "127.0.0.1:9000",
                                                 "--name=qwen", "--threads", "4"]
    assert serving.ready_url(workload) == "http://127.0.0.1:9000/v1/models"
    assert serving.port(_custom(port=9100)) == 9100 and serving.kv_log(workload) is None


def test_a_custom_engines_defaults_and_served_name():
    spec = {"command": ["srv", "{{literal}}", "{model}"], "served_model_name_default": "default-name",
            "kv_log": "vllm"}
    workload = _wl("my-engine", engine_spec=spec)  # a hand-written plan: the defaults apply on the host too
    assert serving.server_argv(workload, {"name": "m", "hf_id": "org/m"}) == ["srv", "{literal}", "org/m"]
    assert serving.ready_url(workload) == "http://127.0.0.1:8000/v1/models"
    assert serving.served_name(workload, HF) == "default-name" and serving.kv_log(workload) == "vllm"
    assert serving.served_name({**workload, "served_model_name": "mine"}, HF) == "mine"
    assert serving.kv_log(_wl("sglang")) == "sglang"


@pytest.mark.parametrize("workload, message", [
    (_custom({"command": ["srv", "{gpu}"]}), "engine my-engine: command unknown placeholder {gpu} (known: {model}"),
    (_custom({"command": "srv {model}"}), "engine my-engine: command must be a non-empty list of strings"),
    (_custom({"kv_log": "ollama"}), "engine my-engine: kv_log 'ollama' is not one of llama.cpp, vllm"),
    (_custom({"ready_path": "v1/models"}), "engine my-engine: ready_path 'v1/models' must start with '/'"),
    (_wl("my-engine"), "engine 'my-engine' is not a serving engine"),
])
def test_a_bad_custom_spec_is_refused_on_the_host_too(workload, message):
    with pytest.raises(serving.ServingError, match="^" + re.escape(message)):
        serving.server_argv(workload, HF)


def test_a_custom_engines_server_is_started_waited_for_and_stopped(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    pidfile = str(tmp_path / "pids")
    port = _free_port()
    workload = _custom({"command": [sys.executable, str(script), "{port}", "0.2", pidfile, "serve"],
                        "ready_path": "/health", "port": port})
    argv = serving.server_argv(workload, HF)
    assert argv == [sys.executable, str(script), str(port), "0.2", pidfile, "serve"]
    with serving.ServerProcess(argv, str(tmp_path / "server.log"), serving.ready_url(workload)) as server:
        assert server.wait_ready(60) >= 0
        pids = _pids(pidfile)
        assert all(_alive(p) for p in pids)
    assert server.stopped == "terminated" and not any(_alive(p) for p in _pids(pidfile))
    assert f"listening on 127.0.0.1:{port}" in (tmp_path / "server.log").read_text()


def test_a_serving_run_of_a_custom_engine_records_its_name_and_expanded_argv(tmp_path, monkeypatch):
    spec = {"command": ["llama-server", "--model", "{model}", "--host", "{host}", "--port", "{port}", "--alias",
                        "{served_model_name}"], "ready_path": "/v1/models", "port": 8000,
            "served_model_name_default": None, "kv_log": None}
    rec, run_dir = _serving_run(tmp_path, monkeypatch, engine="my-llama", engine_spec=spec)
    section = rec["serving"]
    assert rec["status"] == "ok" and section["engine"] == "my-llama" and rec["engine"] == "my-llama"
    port = section["server"]["port"]
    assert section["server"]["argv"] == ["llama-server", "--model", str(tmp_path / "tiny.gguf"), "--host",
                                         "127.0.0.1", "--port", str(port), "--alias", "tiny"]
    assert len(section["points"]) == 4 and section["server"]["stopped"] == "terminated"
    # kv_log: null - no KV figure, and the record says why rather than guessing a log format
    assert section["kv"] == {"error": "engine my-llama declares no KV log format (kv_log: null)"}
    (tmp_path / "again").mkdir()
    rec, _ = _serving_run(tmp_path / "again", monkeypatch, engine="my-llama",
                          engine_spec={**spec, "kv_log": "llama.cpp"})
    assert "KV buffer size" in rec["serving"]["kv"]["source"]  # the built-in log format it names is read

