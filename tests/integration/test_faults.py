"""Faults on the fake fleet: a killed controller, a host that dies mid-run, a disk that fills.

Every planned run must end up exactly once in the collected results (one valid record.json, one
`finished` ledger event), whatever was killed and whenever; afterwards `playbooks/restore.yml` leaves no
mount in the host's own mount namespace (the sshd's: `ip netns exec` gives it one), no container, and
the GPU state as it was before the campaign.

Figures of a run are printed (pytest -s): kills survived, the stage each kill hit, runs lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 0.5, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.25, "on_timeout": "continue"}
FAST = {"SPARKFLEET_FAKE_RUNTIME_S": "1", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}
KILL_SEED = 20240607
KILLS = 5
#: Seconds one full attempt of the kill campaign takes on the build machine (2 cores, shared); the kill
#: points are drawn between 3 s and this.
EXPECTED_S = 80.0


# ----------------------------------------------------------------------------------------------- helpers


def _model_dir(tmp_path: Path) -> Path:
    """The model's local directory (trtllm reads its tokenizer there) under the hosts' models directory,
    <tmp>/models, which _vars passes as sparkfleet_models_dir (the namespace hosts share one file system)."""
    model = tmp_path / "models" / "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-7B"
    model.mkdir(parents=True, exist_ok=True)
    return model


def _campaign(tmp_path: Path, image: str, name: str, **over) -> Path:
    campaign = {
        "name": name,
        "image": image,
        "models": [{"name": "deepseek", "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                    "path": str(_model_dir(tmp_path))}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [{"name": "small", "preset": "T1", "requests": 4, "env": FAST}],
        "iterations": 3,
        "order": "interleaved",
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 120,
    }
    campaign.update(over)
    path = tmp_path / f"campaign-{name}.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


def _vars(tmp_path: Path) -> Path:
    """Per-host GPU state paths (the namespace hosts share one file system), persistence pinned on, and the
    models directory that holds _campaign's model."""
    path = tmp_path / "fault-vars.json"
    path.write_text(json.dumps({
        "sparkfleet_models_dir": str(tmp_path / "models"),
        "gpu_state_state_file": "{{ sparkfleet_work_dir }}/run/gpu-state.json",
        "sparkfleet_gpu_persistence_mode": True,
        "sparkfleet_drop_caches": False,
    }))
    return path


def _bench_cmd(inventory: str, campaign: Path, results: Path, extra_vars: Path) -> list[str]:
    return ["ansible-playbook", "-i", inventory, "bench.yml", "-e", f"@{campaign}", "-e", f"@{extra_vars}",
            "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
            # The build machine runs other tests at the same time: gates that would refuse it are relaxed.
            "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
            "-e", "sparkfleet_preflight_min_free_disk_gib=1"]


def _restore(repo: Path, env: dict, inventory: str, extra_vars: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", inventory, "playbooks/restore.yml", "-e", f"@{extra_vars}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def _smi(host, *args: str) -> None:
    """The host's nvidia-smi stand-in, on the host's own state file."""
    env = {"PATH": "/usr/bin:/bin", "SPARKFLEET_FAKE_GPU_STATE": f"{host.dir}/gpu-state.json", **host.env}
    subprocess.run([f"{host.dir}/bin/nvidia-smi", *args], check=True, capture_output=True, env=env)


def _gpu_settings(host) -> dict:
    """What the GPU tuning changes (the thermal segment moves with load, so it is left out)."""
    gpus = json.loads(Path(host.dir, "gpu-state.json").read_text())["gpus"]
    return {i: {k: g.get(k) for k in ("persistence", "locked_clocks", "power_limit")} for i, g in gpus.items()}


def _host_mounts(host) -> list[str]:
    """Mount points under the host's dir in the host's own mount namespace (its sshd's)."""
    pid = host.sshd_pid()
    assert pid, f"{host.name}: sshd is not running"
    out = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(host.dir + "/"):
            out.append(point)
    return out


def _containers(campaign: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=sparkfleet.campaign={campaign}"],
                          capture_output=True, text=True, check=True).stdout.split()


def _run_ids(results: Path, campaign: str) -> dict[str, list[str]]:
    doc = json.loads((results / campaign / "campaign.json").read_text())
    return {host: entry["run_ids"] for host, entry in doc["hosts"].items()}


def _ledger(host, campaign: str) -> list[dict]:
    path = Path(host.work_dir, "results", campaign, host.name, "ledger.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _check_exactly_once(results: Path, campaign: str, hosts) -> int:
    """Every planned run exactly once, valid and ok, in the collected tree; returns the runs lost (0)."""
    planned = _run_ids(results, campaign)
    assert sorted(planned) == sorted(h.name for h in hosts)
    lost = 0
    for host in hosts:
        host_dir = results / campaign / host.name
        # Anywhere under the host's collected tree (interrupted attempts' dirs, an unpack cut short): every
        # record.json parses, and each planned run has exactly one, at runs/<run_id>/record.json.
        every = sorted(host_dir.rglob("record.json"))
        records = {}
        for path in every:
            rec = json.loads(path.read_text())
            assert path == host_dir / "runs" / rec["run_id"] / "record.json", path
            records[rec["run_id"]] = rec
        assert len(every) == len(records), [str(p) for p in every]
        assert sorted(records) == sorted(planned[host.name]), (host.name, sorted(records))
        for rid, rec in records.items():
            assert validate(rec) == [], (rid, validate(rec))
            assert rec["run_id"] == rid and rec["host"] == host.name
            assert rec["status"] == "ok", (rid, rec["reason"])
        finished = Counter(e["run_id"] for e in _ledger(host, campaign) if e.get("event") == "finished")
        assert finished == Counter(planned[host.name]), (host.name, finished)  # finished once, every one
        lost += len(set(planned[host.name]) - {r for r, rec in records.items() if rec["status"] == "ok"})
    assert not list(results.glob(f"{campaign}/**/*.tmp"))
    return lost


def _last_task(log: Path) -> str:
    tasks = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("TASK [")]
    return tasks[-1][6:].split("]")[0] if tasks else "(before the first task)"


def _watch(proc: subprocess.Popen, seconds: float, hosts, seen: Counter) -> bool:
    """Wait up to `seconds` for proc, counting mounts seen in the hosts' namespaces; True when it ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return True
        for host in hosts:
            if host.sshd_pid() and Path(f"/proc/{host.sshd_pid()}").exists():
                seen[host.name] = max(seen[host.name], len(_host_mounts(host)))
        time.sleep(0.5)
    return proc.poll() is not None


def _check_host_clean(hosts, campaign: str, gpu_before: dict) -> None:
    for host in hosts:
        assert _host_mounts(host) == [], (host.name, _host_mounts(host))
        assert _gpu_settings(host) == gpu_before[host.name], host.name
        assert not Path(host.work_dir, "state", "gpu_state_saved.json").exists()
    assert _containers(campaign) == []


def _prepare_gpus(fleet) -> dict:
    """Persistence off first, so the campaign's `persistence on` is a change that must be undone."""
    for host in fleet.hosts:
        _smi(host, "-pm", "0")
    return {h.name: _gpu_settings(h) for h in fleet.hosts}


# ------------------------------------------------------------------------------------------------- tests


def test_controller_killed_at_random_points_loses_no_run(fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(2)
    name = f"kill{os.getpid()}"
    results = tmp_path / "results"
    extra = _vars(tmp_path)
    gpu_before = _prepare_gpus(fleet)
    assert all(s["0"]["persistence"] is False for s in gpu_before.values())
    cmd = _bench_cmd(fleet.inventory, _campaign(tmp_path, test_image, name), results, extra)
    rng = random.Random(KILL_SEED)
    # Seeded, and spread over the whole length: one delay drawn in each of KILLS equal slices of
    # [3 s, EXPECTED_S], in a shuffled order (early kills land in validate/preflight, late ones in the matrix,
    # collect or report). An attempt that ends before its kill point is not a kill: draw again, below the
    # length of the shortest attempt that ended (a resumed campaign skips its finished runs, and a faster
    # machine finishes sooner: a fixed bound would let most redraws land after the end).
    step = (EXPECTED_S - 3.0) / KILLS
    delays = [3.0 + step * (k + rng.random()) for k in range(KILLS)]
    rng.shuffle(delays)
    mounts_seen: Counter = Counter()
    kills: list[tuple[float, str]] = []
    attempts = 0
    upper = EXPECTED_S
    while len(kills) < KILLS and attempts < 3 * KILLS:
        attempts += 1
        delay = delays[attempts - 1] if attempts <= KILLS and delays[attempts - 1] < upper \
            else rng.uniform(3.0, max(3.5, 0.9 * upper))
        log = tmp_path / f"attempt-{attempts}.log"
        with log.open("w") as out:
            started = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=repo, env=ansible_env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                ended = _watch(proc, delay, fleet.hosts, mounts_seen)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if not ended:
            kills.append((round(delay, 1), _last_task(log)))
        else:
            upper = min(upper, time.monotonic() - started)
    assert len(kills) == KILLS, f"only {len(kills)} of {attempts} attempts were killed before they ended"

    # Restore is safe right after a crash: it unmounts and puts the GPU back even with runs half done.
    restored = _restore(repo, ansible_env, fleet.inventory, extra)
    assert restored.returncode == 0, restored.stdout[-4000:]
    _check_host_clean(fleet.hosts, name, gpu_before)

    log = tmp_path / "final.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=ansible_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        _watch(proc, 600, fleet.hosts, mounts_seen)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, log.read_text()[-6000:]

    lost = _check_exactly_once(results, name, fleet.hosts)
    _check_host_clean(fleet.hosts, name, gpu_before)  # a completed campaign cleans up after itself too
    # the mount check is not vacuous: the campaign did mount the rootfs in those namespaces
    assert all(mounts_seen[h.name] > 0 for h in fleet.hosts), mounts_seen
    print(f"\n[faults] controller kills survived: {len(kills)} in {attempts} attempts "
          f"(delay s, stage): {kills}; runs lost: {lost}; mounts seen per host: {dict(mounts_seen)}")
    assert lost == 0


def test_host_killed_mid_run_resumes_exactly_once(fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(2)
    victim, other = fleet.hosts[1], fleet.hosts[0]
    name = f"hostkill{os.getpid()}"
    results = tmp_path / "results"
    extra = _vars(tmp_path)
    gpu_before = _prepare_gpus(fleet)
    env = dict(ansible_env)
    env["ANSIBLE_SSH_ARGS"] = ("-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=2 "
                               "-o ServerAliveCountMax=3 -o ConnectTimeout=5")
    cmd = _bench_cmd(fleet.inventory, _campaign(tmp_path, test_image, name), results, extra)
    ledger = Path(victim.work_dir, "results", name, victim.name, "ledger.jsonl")

    def events(kind: str) -> int:
        try:
            return sum(1 for line in ledger.read_text().splitlines() if f'"{kind}"' in line)
        except OSError:
            return 0

    log = tmp_path / "first.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            # mid-run: at least one run finished and the next one started but not finished
            while not (events("finished") >= 1 and events("started") > events("finished")) \
                    and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert proc.poll() is None and events("started") > events("finished"), log.read_text()[-4000:]
            pids = subprocess.run(["ip", "netns", "pids", victim.netns], capture_output=True, text=True,
                                  check=True).stdout.split()
            for pid in pids:  # the machine dies: sshd, the module, the workload, all at once
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            killed_at = (events("started"), events("finished"))
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode != 0, "a host died: the playbook must say so"
    assert "UNREACHABLE" in log.read_text() or "unreachable" in log.read_text(), log.read_text()[-4000:]
    # the other host finished its whole plan and was collected
    planned = _run_ids(results, name)
    got = sorted(p.parent.name for p in (results / name / other.name / "runs").glob("*/record.json"))
    assert got == sorted(planned[other.name])
    assert all(json.loads(p.read_text())["status"] == "ok"
               for p in (results / name / other.name / "runs").glob("*/record.json"))

    # The machine comes back (its sshd is restarted; the stale pid file goes first).
    Path(victim.pidfile).unlink(missing_ok=True)
    fleet.start_sshd(victim)
    log2 = tmp_path / "resume.log"
    resumed = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    log2.write_text(resumed.stdout + resumed.stderr)
    assert resumed.returncode == 0, resumed.stdout[-6000:]
    assert f"6 runs already done on {other.name}" in resumed.stdout
    lost = _check_exactly_once(results, name, fleet.hosts)
    # host side: a run killed in its cooldown has an empty dir, which the (files-only) collect does not bring home
    interrupted = [p.name for p in Path(victim.work_dir, "results", name, victim.name, "runs").glob("*.interrupted-*")]
    recovered = [e["run_id"] for e in _ledger(victim, name) if e.get("event") == "finished" and e.get("recovered")]
    # the run the host died in was kept aside as interrupted (or, killed between record and ledger, recovered)
    assert interrupted or recovered, "the run the host died in left no trace"
    restored = _restore(repo, env, fleet.inventory, extra)
    assert restored.returncode == 0, restored.stdout[-4000:]
    _check_host_clean(fleet.hosts, name, gpu_before)
    print(f"\n[faults] host {victim.name} killed at (started, finished) = {killed_at}; resumed; "
          f"interrupted kept aside: {interrupted}; runs lost: {lost}")
    assert lost == 0


def test_disk_full_run_is_recorded_failed_and_earlier_runs_stay_intact(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    name = f"diskfull{os.getpid()}"
    results = tmp_path / "results"
    extra = _vars(tmp_path)
    gpu_before = _prepare_gpus(fleet)
    mountpoint = Path(host.work_dir, "results")
    mountpoint.mkdir(parents=True, exist_ok=True)
    # Sized so the first runs (and the 512 KiB reserve, and the 4 MiB low-space margin) fit; the flood doesn't.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "sparkfleet-diskfull", str(mountpoint)], check=True)
    try:
        # The host's sshd (and so its mount namespace) starts after the mount: the host and dockerd see the
        # same small file system.
        fleet.stop_sshd(host)
        fleet.start_sshd(host)
        assert str(mountpoint) in _host_mounts(host)
        campaign = _campaign(tmp_path, test_image, name, iterations=1, workloads=[
            {"name": "small", "preset": "T1", "requests": 4, "env": {**FAST, "SPARKFLEET_FAKE_RUNTIME_S": "0.2"}},
            {"name": "flood", "preset": "T1", "requests": 4,
             "env": {**FAST, "SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_LOG_MIB": "16"}},
        ])
        proc = subprocess.run(_bench_cmd(fleet.inventory, campaign, results, extra), cwd=repo, env=ansible_env,
                              capture_output=True, text=True, timeout=600)
        (tmp_path / "diskfull.log").write_text(proc.stdout + proc.stderr)
        host_dir = mountpoint / name / host.name
        planned = _run_ids(results, name)[host.name]
        records = {p.parent.name: json.loads(p.read_text()) for p in (host_dir / "runs").glob("*/record.json")}
        by = {(r["workload"], r["environment"]): r for r in records.values()}
        print(f"\n[faults] disk full: rc {proc.returncode}; "
              + "; ".join(f"{w}/{e}: {r['status']} ({r['reason']})" for (w, e), r in sorted(by.items())))
        for env in ("native", "container"):  # the runs before the flood: intact and valid
            rec = by[("small", env)]
            assert validate(rec) == [] and rec["status"] == "ok", rec["reason"]
            assert (host_dir / "runs" / rec["run_id"] / "bench.log").stat().st_size > 0
        flooded = by[("flood", "native")]  # interleaved: flood/native is the first run that fills the disk
        assert validate(flooded) == [], validate(flooded)
        assert flooded["status"] == "failed" and "disk full" in flooded["reason"], flooded["reason"]
        assert set(records) <= set(planned)
        ledger = [json.loads(line) for line in (host_dir / "ledger.jsonl").read_text().splitlines()]
        assert {e["run_id"]: e["status"] for e in ledger if e["event"] == "finished"}[flooded["run_id"]] == "failed"
        restored = _restore(repo, ansible_env, fleet.inventory, extra)
        assert restored.returncode == 0, restored.stdout[-4000:]
        leftover = [m for m in _host_mounts(host) if m != str(mountpoint)]
        assert leftover == []
        assert _gpu_settings(host) == gpu_before[host.name]
        assert _containers(name) == []
    finally:
        pid = host.sshd_pid()
        if pid:
            subprocess.run(["nsenter", "-t", str(pid), "-m", "umount", "-l", str(mountpoint)], capture_output=True)
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


def test_a_second_campaign_on_a_busy_host_is_refused_and_touches_nothing(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    """Two campaigns on one host: the second run is refused by the host lease before it changes anything, naming
    the run that holds the host; the first one's mounts stay and it finishes every run; then the host is free."""
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    first, second = f"holder{os.getpid()}", f"intruder{os.getpid()}"
    results = tmp_path / "results"
    extra = _vars(tmp_path)
    slow = {**FAST, "SPARKFLEET_FAKE_RUNTIME_S": "4"}
    holder_cmd = _bench_cmd(fleet.inventory, _campaign(tmp_path, test_image, first, iterations=2, workloads=[
        {"name": "small", "preset": "T1", "requests": 4, "env": slow}]), results, extra)
    intruder_cmd = _bench_cmd(fleet.inventory, _campaign(tmp_path, test_image, second, iterations=1), results, extra)
    jobs_dir = Path(host.work_dir, "results", ".sparkfleet", "jobs")
    log = tmp_path / "holder.log"
    with log.open("w") as out:
        holder = subprocess.Popen(holder_cmd, cwd=repo, env=ansible_env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not list(jobs_dir.glob("*.json")) and holder.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert list(jobs_dir.glob("*.json")), log.read_text()[-4000:]  # the holder's job runs
            mounts = _host_mounts(host)
            assert mounts, "the holder mounted its native rootfs"
            intruder = subprocess.run(intruder_cmd, cwd=repo, env=ansible_env, capture_output=True, text=True,
                                      timeout=600)
            assert intruder.returncode != 0
            assert "is busy" in intruder.stdout and first in intruder.stdout, intruder.stdout[-4000:]
            assert _host_mounts(host) == mounts  # the refused run undid nothing of the holder's
            assert holder.wait(timeout=600) == 0, log.read_text()[-6000:]
        finally:
            if holder.poll() is None:
                os.killpg(holder.pid, signal.SIGKILL)
                holder.wait()
    assert not list(results.glob(f"{second}/*/runs/*/record.json"))  # nothing of the intruder ran
    _check_exactly_once(results, first, fleet.hosts)
    assert not Path(host.work_dir, "results", ".sparkfleet", "host.lease").exists()  # given back at the end
    again = subprocess.run(intruder_cmd, cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-4000:]  # the host is free for the next run
    restored = _restore(repo, ansible_env, fleet.inventory, extra)
    assert restored.returncode == 0, restored.stdout[-4000:]
