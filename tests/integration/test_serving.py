"""Serving end to end (issue 25), with no stand-in for the server or the client: llama.cpp's real llama-server
(built from source, tests/fleet/llamacpp.py) serves a tiny random-weight GGUF the test makes itself
(tests/fleet/tinymodel.py), natively (chroot into the image's rootfs) and in Docker, driven by the real load
generator (llama-benchy 0.4.0) through bench.yml on the localhost inventory: 2 iterations x 2 depths x
2 concurrency levels. Then the report (read in headless Chromium), and interrupting a serving run (SIGINT to
ansible-playbook; a killed server) leaves no server process or container behind.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tinymodel import CORPUS, make_tiny_model

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.docker, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IMAGE_REPO = "sparkfleet-test/llamacpp"
PROFILE = {"depth": [0, 256], "concurrency": [1, 2], "pp": [64], "tg": [48]}


@pytest.fixture(scope="module")
def serving_image(test_image, llama_server, tmp_path_factory) -> str:
    """The test image (Debian bookworm, the TensorRT-LLM-shaped one) with llama-server on its PATH: what an
    engine image is to a Spark owner. Built offline (the base is local), tagged by the binary's content."""
    context = tmp_path_factory.mktemp("image")
    shutil.copy2(llama_server, context / "llama-server")
    (context / "Dockerfile").write_text(f"FROM {test_image}\nCOPY llama-server /usr/local/bin/llama-server\n")
    digest = subprocess.run(["sha256sum", str(llama_server)], capture_output=True, text=True, check=True).stdout[:12]
    ref = f"{IMAGE_REPO}:{test_image.rsplit(':', 1)[-1][:12]}-{digest}"
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0:
        subprocess.run(["docker", "build", "-q", "-t", ref, str(context)], check=True, capture_output=True,
                       timeout=600)
    return ref


def _setup(tmp_path: Path, image: str, explicit: bool) -> dict:
    """A work dir whose models directory holds the tiny model, a campaign file and the extra vars. Without
    ``explicit`` nothing test-only is set (issue 33): the client's tokenizer is the tokenizer.json tinymodel writes
    beside the GGUF, the prompts the corpus that ships with the collection, and the random model says
    random_weights. ``explicit``: the tokenizer, the corpus and --skip-coherence given as settings instead."""
    work, results = tmp_path / "work", tmp_path / "results"
    models = work / "models"
    model = make_tiny_model(models / "tiny")
    entry = {"name": "tiny", "path": str(model["gguf"])}
    entry.update({"tokenizer": str(model["tokenizer"].parent)} if explicit else {"random_weights": True})
    workload = {"name": "chat", "engine": "llama.cpp", "profile": PROFILE, "runs": 2, "server_args": ["-t", "1"],
                "ready_timeout_s": 120}
    if explicit:  # a random model cannot answer llama-benchy's "capital of France" coherence check
        workload["client_args"] = ["--skip-coherence"]
    campaign = {"sparkfleet_campaign": {
        "name": "serve-e2e", "image": image, "models": [entry], "environments": ["native", "container"],
        "workloads": [workload], "iterations": 2, "warmup_runs": 0, "order": "interleaved",
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"},
        "timeout_s": 900}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    # the client: the venv's llama-benchy (this machine has no PyPI for the serving_client role's install)
    extra = ["-e", f"@{path}", "-e", f"sparkfleet_work_dir={work}", "-e", f"sparkfleet_results_dir={results}",
             "-e", "sparkfleet_image_offline=true",
             "-e", f"sparkfleet_serving_client={Path(sys.executable).parent / 'llama-benchy'}"]
    if explicit:
        extra += ["-e", f"sparkfleet_serving_corpus={CORPUS}"]
    return {"work": work, "results": results, "extra": extra, "campaign": path, "model": model}


@pytest.fixture
def serving_setup(tmp_path, serving_image):
    """The tokenizer, the corpus and --skip-coherence given explicitly, as settings."""
    return _setup(tmp_path, serving_image, explicit=True)


@pytest.fixture
def default_serving_setup(tmp_path, serving_image):
    """Nothing test-only set: what the host finds by itself."""
    return _setup(tmp_path, serving_image, explicit=False)


def servers(work: Path) -> list[tuple[int, str]]:
    """(pid, root) of the llama-server processes serving this test's model (natively in the chroot under
    ``work``, or in a container: both show on the host's process list with the model's path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"llama-server") or str(work).encode() not in b" ".join(argv):
                continue
            found.append((int(proc.name), os.readlink(proc / "root")))
        except OSError:
            continue
    return found


def leftovers(work: Path, campaign: str = "serve-e2e") -> tuple[list, list[str]]:
    """llama-server processes of this test and sparkfleet containers of its campaign still there."""
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=sparkfleet.campaign={campaign}"],
                                capture_output=True, text=True).stdout.split()
    return servers(work), containers


def dump_dom(page: Path, profile: Path) -> str:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


def test_llama_cpp_served_native_and_in_docker_driven_by_llama_benchy(default_serving_setup, ansible_env, repo,
                                                                     tmp_path):
    s = default_serving_setup
    proc = subprocess.run(["ansible-playbook", "bench.yml", *s["extra"]], cwd=repo, env=ansible_env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "4 runs planned on localhost" in proc.stdout, proc.stdout[-3000:]
    runs = sorted((s["results"] / "serve-e2e" / "localhost" / "runs").glob("*/record.json"))
    records = [json.loads(p.read_text()) for p in runs]
    assert sorted(r["environment"] for r in records) == ["container", "container", "native", "native"]
    points_wanted = {(d, c) for d in PROFILE["depth"] for c in PROFILE["concurrency"]}
    for path, rec in zip(runs, records, strict=True):
        assert validate(rec) == [] and rec["status"] == "ok", (rec["reason"], rec["serving"])
        serving = rec["serving"]
        assert serving["engine"] == "llama.cpp" and serving["client"]["name"] == "llama-benchy"
        assert serving["client"]["version"] == "0.4.0"
        # the server really ran where the environment says: chroot (no /.dockerenv) or the container's network
        server = serving["server"]
        assert server["argv"][0].endswith("llama-server") and server["ready_s"] > 0
        assert server["stopped"] in ("terminated", "exited")
        if rec["environment"] == "container":
            assert server.get("network") == "host"
        # llama.cpp at its default verbosity: the KV capacity in tokens (slots x per-slot context)
        assert serving["kv"]["max_tokens"] and serving["kv"]["max_tokens"] > 0
        got = {(p["depth"], p["concurrency"]) for p in serving["points"]}
        assert got == points_wanted
        orders = sorted(p["order"] for p in serving["points"])
        assert orders == [0, 1, 2, 3]
        for point in serving["points"]:
            assert point["status"] == "ok", point
            m = point["metrics"]
            assert m["pp_tok_s"] > 0 and m["pp_req_tok_s"] > 0 and m["e2e_ttft_ms"] > 0
            # llama-benchy leaves a decode rate out when a request's tokens all arrived in one network read (its
            # rate needs two arrival times): on a loaded 2-core machine a point may lack it, never hold a wrong one
            if "tg_tok_s" in m:
                assert m["tg_tok_s"] > 0 and m["tg_req_tok_s"] > 0 and len(point["samples"]["tg_tok_s"]) <= 2
            raw = json.loads((path.parent / point["raw"]).read_text())
            assert raw["benchmarks"] and raw["version"] == "0.4.0"
        assert sum("tg_tok_s" in p["metrics"] for p in serving["points"]) >= 2, serving["points"]
        log = (path.parent / "server.log").read_text()
        assert "llama" in log and "n_slots" in log
        # the client ran on the host against 127.0.0.1, with the corpus sparkfleet served on loopback: the one that
        # ships with the collection, installed by the serving_client role; its tokenizer the one beside the GGUF
        bench = (path.parent / "bench.log").read_text()
        assert "Downloading book from http://127.0.0.1:" in bench and "gutenberg" not in bench.lower()
        assert serving["corpus"] == str(s["work"] / "clients" / "corpus.txt")
        assert Path(serving["corpus"]).read_bytes() == CORPUS.read_bytes()
        assert serving["tokenizer"] == {"path": str(s["model"]["gguf"].parent), "gguf": str(s["model"]["gguf"]),
                                        "source": "the tokenizer.json beside the GGUF", "tokens": 1024}
        argv = serving["client"]["argv"]
        assert argv[argv.index("--book-url") + 1].startswith("http://127.0.0.1:") and "--skip-coherence" in argv
        assert serving["client"]["coherence_check"] == "skipped: the model has random_weights"
    # the native runs chroot into the image's rootfs: the engine's own libraries, not the host's
    native = next(r for r in records if r["environment"] == "native")
    assert native["fingerprint"] is None or native["fingerprint"].get("environment_kind") in (None, "native")
    assert leftovers(s["work"]) == ([], [])

    report = subprocess.run([sys.executable, "-m", "sparkfleet", "report", str(s["results"] / "serve-e2e")],
                            cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    out = s["results"] / "serve-e2e" / "report"
    with (out / "serving_cells.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    # every (environment, depth, concurrency) point has its statistics over the 2 iterations, or is named where
    # its figures were left out: on a loaded machine a starved llama-benchy reads a tiny model's tokens in one
    # piece and gives a run no decode figure (seen in CI beside three other suites on 2 cores), which the report
    # screens out and names (issue 32), never averages in
    seen = {(c["environment"], int(c["depth"]), int(c["concurrency"])) for c in cells}
    with (out / "serving_left_out.csv").open() as fh:
        named = {(r["environment"], r["point"]) for r in csv.DictReader(fh)}
    wanted = {(e, d, c) for e in ("native", "container") for d, c in points_wanted}
    unseen = {(e, d, c) for e, d, c in wanted - seen if (e, f"d{d}.c{c}.pp64.tg48") not in named}
    assert seen <= wanted and not unseen, (seen, named)
    assert {e for e, _, _ in seen} == {"native", "container"}
    with (out / "serving_comparisons.csv").open() as fh:
        comparisons = list(csv.DictReader(fh))
    assert comparisons and {c["outcome"] for c in comparisons} <= {"same", "different", "undetermined"}
    if CHROMIUM:
        dom = dump_dom(out / "index.html", tmp_path / "profile")
        assert "Serving" in dom and "per user" in dom and "aggregate" in dom
        assert dom.count("<img") >= 2  # the throughput-vs-concurrency and TTFT-vs-depth figures


def test_a_bare_llama_cpp_run_on_one_host_needs_no_test_only_setting(llama_server, ansible_env, repo, tmp_path):
    """Issue 33: the model a GGUF alone (no tokenizer.json beside it) marked random_weights, the environment bare,
    llama-server where the user's login profile puts it on PATH (not on the PATH Ansible runs the module with), no
    corpus setting. The run finds the server, derives the client's tokenizer from the GGUF's vocabulary, serves the
    collection's corpus and skips the coherence check, and every point is measured."""
    home = tmp_path / "home"  # the user's home: its .profile puts the engine on the login shell's PATH
    engines = home / "opt" / "llama" / "bin"
    engines.mkdir(parents=True)
    shutil.copy2(llama_server, engines / "llama-server")
    (home / ".profile").write_text('PATH="$HOME/opt/llama/bin:$PATH"\nexport PATH\n')
    env = dict(ansible_env, HOME=str(home))
    assert shutil.which("llama-server", path=env["PATH"]) is None  # Ansible's own PATH does not have it
    work, results = tmp_path / "work", tmp_path / "results"
    built = make_tiny_model(tmp_path / "build")
    gguf = work / "models" / "tiny.gguf"
    gguf.parent.mkdir(parents=True)
    shutil.copy2(built["gguf"], gguf)
    profile = {"depth": [0, 128], "concurrency": [1, 2], "pp": [64], "tg": [32]}
    campaign = {"sparkfleet_campaign": {
        "name": "serve-bare", "models": [{"name": "tiny", "path": str(gguf), "random_weights": True}],
        "environments": [{"name": "host", "kind": "bare"}],
        "workloads": [{"name": "chat", "engine": "llama.cpp", "profile": profile, "runs": 2,
                       "server_args": ["-t", "1"], "ready_timeout_s": 120}],
        "iterations": 1, "warmup_runs": 0, "timeout_s": 900,
        "cooldown": {"threshold_c": 45, "max_wait_s": 30, "on_timeout": "continue"}}}
    path = tmp_path / "campaign.yml"
    path.write_text(yaml.safe_dump(campaign))
    proc = subprocess.run(["ansible-playbook", "bench.yml", "-e", f"@{path}", "-e", f"sparkfleet_work_dir={work}",
                           "-e", f"sparkfleet_results_dir={results}",
                           "-e", f"sparkfleet_serving_client={Path(sys.executable).parent / 'llama-benchy'}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    (record_path,) = (results / "serve-bare" / "localhost" / "runs").glob("*/record.json")
    rec = json.loads(record_path.read_text())
    assert validate(rec) == [] and rec["status"] == "ok", (rec["reason"], rec.get("serving"))
    serving = rec["serving"]
    assert serving["server"]["executable"] == str(engines / "llama-server")
    assert {p["status"] for p in serving["points"]} == {"ok"} and len(serving["points"]) == 4
    tokenizer = serving["tokenizer"]
    assert tokenizer["source"] == "derived from the GGUF's vocabulary" and tokenizer["gguf"] == str(gguf)
    assert tokenizer["path"].startswith(str(work / "results" / ".sparkfleet" / "tokenizers"))
    assert (Path(tokenizer["path"]) / "tokenizer.json").is_file() and tokenizer["tokens"] == 1024
    assert serving["corpus"] == str(work / "clients" / "corpus.txt")
    assert serving["client"]["coherence_check"] == "skipped: the model has random_weights"
    argv = serving["client"]["argv"]
    assert argv[argv.index("--tokenizer") + 1] == tokenizer["path"] and "--skip-coherence" in argv
    bench = (record_path.parent / "bench.log").read_text()
    assert "Downloading book from http://127.0.0.1:" in bench and "gutenberg" not in bench.lower()  # the loopback
    assert "Falling back to 'gpt2'" not in bench  # llama-benchy loaded the derived tokenizer


def _wait_for(predicate, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def clients(work: Path) -> list[int]:
    """llama-benchy processes driving this test's servers (their corpus and output live under ``work``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = b" ".join((proc / "cmdline").read_bytes().split(b"\0"))
        except OSError:
            continue
        if proc.name.isdigit() and b"llama-benchy" in argv and str(work).encode() in argv:
            found.append(int(proc.name))
    return found


def sparkfleet_processes(marker: str) -> list[str]:
    """Command lines of the processes this test's `sparkfleet run` started (ansible-playbook, its workers, the
    background bench_run job): each carries the test's campaign file or work dir in its arguments or its
    module's arguments file, so ``marker`` (the tmp dir) finds them."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in argv and ("ansible" in argv or "sparkfleet" in argv or "bench_run" in argv):
            found.append(f"{proc.name}: {argv[:200]}")
    return found


def test_interrupting_a_serving_run_leaves_no_server_or_container(serving_setup, ansible_env, repo, tmp_path):
    """Ctrl-C (SIGINT to `sparkfleet run`'s process group, as a terminal sends it) mid-point, while a container's
    server is up and llama-benchy drives it: `sparkfleet run` stops what it started - its playbook, the background
    job, the server, the client, the container, the mounts, the host lease - and exits 130. Then a resume in which
    the native server is killed under the client. No llama-server process and no container outlives either."""
    s = serving_setup
    work = s["work"]
    campaign = yaml.safe_load(s["campaign"].read_text())
    spec = campaign["sparkfleet_campaign"]
    spec["environments"], spec["iterations"] = ["container", "native"], 1
    # Points long enough to be caught in (the tiny model serves a default point in well under a second)
    spec["workloads"][0]["runs"] = 3
    spec["workloads"][0]["profile"] = {**PROFILE, "tg": [1024]}
    s["campaign"].write_text(yaml.safe_dump(campaign))
    ledger = work / "results" / "serve-e2e" / "localhost" / "ledger.jsonl"  # the host's results root

    def in_a_point() -> bool:
        """The ledger's last point event is a start: a point is being measured (its client drives the server)."""
        try:
            points = [line for line in ledger.read_text().splitlines() if '"event": "point"' in line]
        except OSError:
            return False
        return bool(points) and '"phase": "started"' in points[-1]

    first = tmp_path / "interrupted.log"
    run = subprocess.Popen([sys.executable, "-m", "sparkfleet", "run", "--quiet", *s["extra"]], cwd=repo,
                           env=ansible_env, stdout=first.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert _wait_for(lambda: in_a_point() and leftovers(work)[1], timeout=600, step=0.2), \
            "no serving container with a point in progress came up"
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C at the terminal reaches the whole foreground group
        assert run.wait(timeout=600) == 130, first.read_text()[-6000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    log = first.read_text()
    assert "nothing this run started still runs" in log, log[-6000:]
    assert _wait_for(lambda: leftovers(work) == ([], []) and not clients(work), timeout=60), leftovers(work)
    assert not sparkfleet_processes(str(tmp_path)), sparkfleet_processes(str(tmp_path))
    results_root = work / "results"
    assert not list((results_root / ".sparkfleet" / "jobs").glob("*.json"))  # no job registered any more
    assert not (results_root / ".sparkfleet" / "host.lease").exists()  # the host is free for the next run
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(work) in line]

    # the resume: the container run again, then the native one, whose server is killed under the client
    resumed = tmp_path / "resumed.log"
    play = subprocess.Popen(["ansible-playbook", "bench.yml", *s["extra"]], cwd=repo, env=ansible_env,
                            stdout=resumed.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        native = _wait_for(lambda: next((pid for pid, root in servers(work) if root.startswith(str(work))), None),
                           timeout=900, step=0.2)
        assert native, "no native llama-server came up"
        time.sleep(2)  # into the points
        os.kill(native, signal.SIGKILL)
        assert play.wait(timeout=900) == 0, resumed.read_text()[-6000:]
    finally:
        if play.poll() is None:
            os.killpg(play.pid, signal.SIGKILL)
            play.wait()
    assert leftovers(work) == ([], [])
    runs = s["results"] / "serve-e2e" / "localhost" / "runs"
    records = {json.loads(p.read_text())["environment"]: json.loads(p.read_text()) for p in runs.glob("*/record.json")}
    assert records["container"]["status"] == "ok", records["container"]["reason"]
    killed = records["native"]
    failed = [p for p in killed["serving"]["points"] if p["status"] == "failed"]
    assert failed and killed["reason"], killed["serving"]["points"]  # what the dead server cost is named


def test_sparkfleet_run_reports_a_serving_runs_points(serving_setup, ansible_env, repo, tmp_path):
    """Progress inside a run (issue 33): `sparkfleet run --json-events` has a `point` event as each point of a
    serving run starts and finishes (point k of n, the time left in the run), all before that run's `run` event."""
    s = serving_setup
    campaign = yaml.safe_load(s["campaign"].read_text())
    campaign["sparkfleet_campaign"].update(environments=["native"], iterations=1)
    s["campaign"].write_text(yaml.safe_dump(campaign))
    events_file = tmp_path / "events.jsonl"
    proc = subprocess.run([sys.executable, "-m", "sparkfleet", "run", "--quiet", "--json-events", str(events_file),
                           *s["extra"]], cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    points = [e for e in events if e["event"] == "point"]
    n = len(PROFILE["depth"]) * len(PROFILE["concurrency"])
    assert sorted((p["k"], p["phase"]) for p in points) == [(k, phase) for k in range(1, n + 1)
                                                            for phase in ("finished", "started")], points
    assert {(p["host"], p["n"], p["cell"]) for p in points} == {("localhost", n, "tiny/native/chat")}
    finished = [p for p in points if p["phase"] == "finished"]
    assert all(p["status"] == "ok" and p["duration_s"] > 0 for p in finished)
    assert finished[-1]["run_eta_s"] == 0 and finished[-1]["eta_s"] == 0  # the last point of the only run
    (run,) = [i for i, e in enumerate(events) if e["event"] == "run"]
    assert all(events.index(p) < run for p in points)
