"""Only the server sparkfleet started is measured (issue 33): the port is checked free before the launch (naming the
process that holds it), and once the server answers, every socket listening there must be the started server's.

/proc/net/tcp and the fd links read from a fake /proc tree, then with real processes on loopback: a socket the test
binds, the stand-in server of test_serving, a foreign server in the test process, and a whole bench_run whose
"engine" leaves a detached foreign server answering on its port."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _ansible_modules import host_util

listeners = host_util("listeners")
serving = host_util("serving")


# --------------------------------------------------------------------------------- a fake /proc tree

def _hex(address: str) -> str:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in the host's byte order."""
    import ipaddress

    raw = ipaddress.ip_address(address).packed
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return raw.hex().upper()


def _net(entries) -> str:
    """A /proc/net/tcp text: (address, port, state, inode) per line."""
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    lines = [f"{i:4d}: {_hex(addr)}:{port:04X} {_hex('::' if ':' in addr else '0.0.0.0')}:0000 {state} "
             f"00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 0000 100 0 0 10 0"
             for i, (addr, port, state, inode) in enumerate(entries)]
    return head + "".join(line + "\n" for line in lines)


def _proc(tmp_path, tcp=(), tcp6=(), processes=()):
    """A /proc with net/tcp{,6} and, per process (pid, comm, cmdline, socket inodes or None: fd unreadable),
    its stat, cmdline and fd links."""
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(_net(tcp))
    (root / "net" / "tcp6").write_text(_net(tcp6))
    for pid, comm, cmdline, inodes in processes:
        base = root / str(pid)
        base.mkdir()
        (base / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 0 0\n")
        (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline.split()) + b"\0")
        if inodes is not None:
            (base / "fd").mkdir()
            os.symlink("/dev/null", base / "fd" / "0")
            for n, inode in enumerate(inodes, start=3):
                os.symlink(f"socket:[{inode}]", base / "fd" / str(n))
    return str(root)


LISTEN, ESTABLISHED = "0A", "01"


def test_the_listen_entries_that_reach_loopback_are_read_from_both_tables(tmp_path):
    proc = _proc(tmp_path, tcp=[("0.0.0.0", 8080, LISTEN, 11), ("127.0.0.1", 8080, ESTABLISHED, 12),
                                ("10.0.0.5", 8080, LISTEN, 13), ("127.0.0.1", 9090, LISTEN, 14)],
                 tcp6=[("::", 8080, LISTEN, 21), ("::1", 8080, LISTEN, 22)])
    assert listeners.listening(8080, proc) == [listeners.Listener("0.0.0.0", 8080, 11),
                                               listeners.Listener("::", 8080, 21)]
    assert listeners.parse("header\nnot a line\n") == []


FOREIGN = (20, "python3", "python3 -m http.server 8080", [11])


@pytest.mark.parametrize("processes, ours, accept, status, detail", [
    ([(10, "llama-server", "llama-server --port 8080", [11])], {10}, None, "verified", "started server's"),
    ([(10, "llama-server", "llama-server", [5]), FOREIGN], {10}, None, "foreign",
     "not the one sparkfleet started: pid 20 (python3 -m http.server 8080) listens there"),
    ([(10, "llama-server", "llama-server", [5]), (30, "docker-proxy", "docker-proxy -container-ip 172.17.0.2", [11])],
     {10}, lambda h: h["comm"] == "docker-proxy", "verified", "through pid 30 (docker-proxy"),
    ([(10, "docker", "docker run", [5]), (30, "docker-proxy", "docker-proxy -container-ip 172.17.0.9", [11])],
     {10}, lambda h: False, "foreign", "pid 30 (docker-proxy"),
    ([(10, "llama-server", "llama-server", [5])], {10}, None, "foreign", "held by no process this job can see"),
    ([(10, "llama-server", "llama-server", None)], {10}, None, "unverified", "could not be read"),
], ids=["ours", "foreign", "its-docker-proxy", "another-containers-proxy", "holder-unseen", "ours-unreadable"])
def test_the_listener_is_the_started_servers_or_the_run_says_whose(tmp_path, processes, ours, accept, status,
                                                                   detail):
    proc = _proc(tmp_path, tcp=[("0.0.0.0", 8080, LISTEN, 11)], processes=processes)
    found = listeners.owner(8080, ours, proc, accept=accept)
    assert found["status"] == status and detail in found["detail"], found


def test_no_listener_in_this_namespace_is_unverified_not_a_failure(tmp_path):
    found = listeners.owner(8080, {10}, _proc(tmp_path, processes=[(10, "vllm", "vllm serve", [5])]))
    assert found["status"] == "unverified" and "another network namespace" in found["detail"]


# ---------------------------------------------------------------------------- real processes, loopback


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _held_port():
    """A port the test process listens on (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@contextlib.contextmanager
def _foreign_server(port: int):
    """Another OpenAI-ish server answering 200 on every GET, in a thread of the test process."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": [{"id": "someone-else"}]}')

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_a_taken_port_refuses_the_launch_naming_the_port_and_its_holder(tmp_path):
    with _held_port() as port:
        server = serving.ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                                       str(tmp_path / "server.log"), f"http://127.0.0.1:{port}/health", port=port)
        with pytest.raises(serving.ServingError) as err, server:
            pass
    text = str(err.value)
    assert f"port {port} on 127.0.0.1 is already in use, by pid {os.getpid()} (" in text
    assert f"listening on 127.0.0.1:{port}" in text and "give the workload another port" in text
    assert server.proc is None and not (tmp_path / "server.log").exists()  # nothing was started


def test_a_free_port_binds_and_a_closed_ones_time_wait_does_not_count():
    port = _free_port()
    assert listeners.port_taken(port) is None
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as engine servers do (httplib, uvicorn)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        held = server.getsockname()[1]
        assert f"port {held} on 127.0.0.1 is already in use" in listeners.port_taken(held)
        with socket.create_connection(("127.0.0.1", held)):
            conn, _ = server.accept()
            conn.close()  # the server's end closes first: it waits in TIME_WAIT on the port
    assert listeners.port_taken(held) is None  # a restarted server binds again (SO_REUSEADDR), so may the next


def test_the_started_server_is_verified_as_the_listener(tmp_path):
    from test_serving import SERVER  # the stand-in engine server (answers /health, has a worker child)

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = _free_port()
    argv = [sys.executable, str(script), str(port), "0", str(tmp_path / "pids"), "serve"]
    with serving.ServerProcess(argv, str(tmp_path / "server.log"), f"http://127.0.0.1:{port}/health",
                               port=port) as server:
        server.wait_ready(60)
        found = server.check_listener()
    assert found["status"] == "verified", found
    assert [h["pid"] for h in found["holders"]] == [server.proc.pid]


def test_a_foreign_server_answering_on_the_port_is_named_and_not_measured(tmp_path):
    port = _free_port()
    # the started "server" never listens; another one starts answering on its port after the check
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    with serving.ServerProcess(argv, str(tmp_path / "server.log"), f"http://127.0.0.1:{port}/health",
                               port=port) as server, _foreign_server(port):
        server.wait_ready(60)  # the foreign server answers 200
        found = server.check_listener()
    assert found["status"] == "foreign"
    assert f"not the one sparkfleet started: pid {os.getpid()} (" in found["detail"]


# ------------------------------------------------------------------------------------- a whole run

# A "llama-server" that never listens itself: it leaves a detached server (its own session, reparented away
# from the started server's tree) answering on the port, as another OpenAI server already running would.
DETACHING_SERVER = textwrap.dedent("""\
    #!{python}
    import http.server, os, sys, threading, time
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.environ["FOREIGN_PID"], "w") as fh:
                fh.write(str(os.getpid()))
            threading.Timer(120, os._exit, (0,)).start()  # bounded, whatever happens to the test
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b'{{"data": [{{"id": "other"}}]}}')
                def log_message(self, *a):
                    pass
            http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
        os._exit(0)
    os.wait()
    with open(os.environ["FAKE_SERVER_PIDS"], "a") as fh:
        fh.write("%d\\n" % os.getpid())
    time.sleep(300)
""")


def _run(tmp_path, monkeypatch, server_text, port):
    from _ansible_modules import STANDINS, load_module, run_module
    from test_serving import FAKE_CLIENT, PROFILE, _executable

    record = host_util("record")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _executable(bindir / "llama-server", server_text)
    client = _executable(tmp_path / "llama-benchy", FAKE_CLIENT)
    path = f"{bindir}:{STANDINS}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    (tmp_path / "tokenizer.json").write_text("{}")
    model = {"name": "tiny", "path": str(tmp_path / "tiny.gguf"), "tokenizer": str(tmp_path / "tokenizer.json")}
    workload = {"name": "serve", "engine": "llama.cpp", "profile": PROFILE, "runs": 2, "port": port,
                "ready_timeout_s": 60}
    rid = record.run_id("c1", "h1", "tiny", "bare", "serve", 1)
    env = {"PATH": path, "FAKE_SERVER_PIDS": str(tmp_path / "server.pids"),
           "FOREIGN_PID": str(tmp_path / "foreign.pid")}
    args = {"runs": [{"run_id": rid, "order_index": 0, "model": model, "environment": {"name": "bare", "kind": "bare"},
                      "workload": workload, "iteration": 1, "warmup": False}],
            "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
            "cooldown": {"enabled": False}, "timeout_s": 300, "telemetry_interval_s": 0.1, "env": env,
            "serving": {"client": client}, "readiness": {"probe_s": 0}}
    out = run_module(load_module("bench_run"), args)
    assert not out.get("failed"), out
    rec = json.loads(Path(out["runs"][0]["record_path"]).read_text())
    assert record.validate(rec) == []
    return rec


def test_a_run_on_a_taken_port_fails_naming_the_port_and_starts_no_server(tmp_path, monkeypatch):
    from test_serving import FAKE_SERVER

    with _held_port() as port:
        rec = _run(tmp_path, monkeypatch, FAKE_SERVER, port)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith(f"port {port} on 127.0.0.1 is already in use, by pid {os.getpid()} (")
    assert rec["serving"]["points"] == [] and rec["serving"]["server"]["ready_s"] is None
    assert not (tmp_path / "server.pids").exists()  # the engine was never started


def test_a_run_records_its_own_server_as_the_verified_listener(tmp_path, monkeypatch):
    from test_serving import FAKE_SERVER

    rec = _run(tmp_path, monkeypatch, FAKE_SERVER, _free_port())
    (server_pid,) = [int(p) for p in (tmp_path / "server.pids").read_text().split()]
    listener = rec["serving"]["server"]["listener"]
    assert rec["status"] == "ok" and listener["status"] == "verified", listener
    assert [h["pid"] for h in listener["holders"]] == [server_pid]
    # named by its command line, cut at CMDLINE_CHARS (how much of the server's path shows depends on the venv's)
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.listeners import CMDLINE_CHARS
    assert 0 < len(listener["holders"][0]["cmdline"]) <= CMDLINE_CHARS


def test_a_run_whose_port_answers_from_another_server_fails_and_measures_nothing(tmp_path, monkeypatch):
    foreign = tmp_path / "foreign.pid"
    try:
        rec = _run(tmp_path, monkeypatch, DETACHING_SERVER, _free_port())
    finally:
        deadline = time.monotonic() + 10
        while not foreign.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if foreign.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(foreign.read_text()), 9)
    holder = int(foreign.read_text())
    assert rec["status"] == "failed" and rec["serving"]["points"] == []  # no point measured the other server
    assert rec["reason"].startswith("the server answering on 127.0.0.1:")
    assert f"not the one sparkfleet started: pid {holder} (" in rec["reason"]
    listener = rec["serving"]["server"]["listener"]
    assert listener["status"] == "foreign" and [h["pid"] for h in listener["holders"]] == [holder]


# ----------------------------------------------------------------------------------------- a container

FAKE_DOCKER = textwrap.dedent("""\
    #!/bin/sh
    # docker inspect --format {{{{.State.Pid}}}} NAME: the "container's" init; the IPAddress format: its address
    case "$*" in
      *State.Pid*) cat {init} ;;
      *IPAddress*) echo "172.17.0.2 " ;;
    esac
    exit 0
""")


def _fake_docker(tmp_path) -> str:
    path = tmp_path / "docker"
    path.write_text(FAKE_DOCKER.format(init=tmp_path / "init.pid"))
    path.chmod(0o755)
    return str(path)


def test_a_host_network_containers_listener_is_its_own_process_outside_the_started_group(tmp_path):
    """With --network host the socket is in this host's table, held by a process of the container (below its init,
    which `docker inspect` names), not by the `docker run` the job started."""
    from test_serving import SERVER

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = _free_port()
    docker = _fake_docker(tmp_path)
    run_cli = [sys.executable, "-c", "import time; time.sleep(120)"]  # stands for `docker run`
    container = None
    try:
        with serving.ServerProcess(run_cli, str(tmp_path / "server.log"), f"http://127.0.0.1:{port}/health",
                                   container=(docker, "sf-run"), port=port) as server:
            container = subprocess.Popen([sys.executable, str(script), str(port), "0", str(tmp_path / "pids"),
                                          "serve"], start_new_session=True, stdout=subprocess.DEVNULL)
            (tmp_path / "init.pid").write_text(str(container.pid))
            server.wait_ready(60)
            found = server.check_listener()
    finally:
        if container is not None:
            container.kill()
            container.wait(timeout=30)
    assert found["status"] == "verified", found
    assert [h["pid"] for h in found["holders"]] == [container.pid]


@pytest.mark.parametrize("holder, ok", [
    ({"comm": "docker-proxy", "cmdline": "/usr/bin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port 8080 "
                                         "-container-ip 172.17.0.2 -container-port 8080"}, True),
    ({"comm": "docker-proxy", "cmdline": "/usr/bin/docker-proxy -proto tcp -host-port 8080 -container-ip 172.17.0.9 "
                                         "-container-port 8080"}, False),  # another container's
    ({"comm": "python3", "cmdline": "python3 -container-ip 172.17.0.2"}, False),
])
def test_a_published_port_is_accepted_only_through_the_containers_own_docker_proxy(tmp_path, holder, ok):
    assert serving._proxy_of(_fake_docker(tmp_path), "sf-run", holder) is ok
