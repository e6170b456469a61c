"""Hostile inputs: names, paths, arguments and environment values that a shell would execute.

Model names, model paths, `extra_args` and workload environment values full of spaces, quotes, `$()`,
backticks, `;`, `&`, `|`, `>` and globs must reach the workload as literal argv (bench_run launches argv
lists, never a shell): no marker file those payloads would create may exist anywhere, the workload must
print the literal model (record's model_loaded), and every run dir stays inside the results dir.
Newlines in names are refused by `sparkfleet validate`. A fetched results tree with `..`, absolute or
link members is refused by collect's `results_unpack` action, also when the archive is what the collect role's `tar`
makes of a host's tree with a symlink in it.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate
from sparkfleet.cli import main as sparkfleet_main

FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 0.5, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.25, "on_timeout": "continue"}
FAST = {"SPARKFLEET_FAKE_RUNTIME_S": "0.2", "SPARKFLEET_FAKE_ALLOC_MIB": "16"}
MARK = "sfpwned"
#: Relative markers land in the workload's working directory (its run dir) if a shell ever ran them.
MODEL = f"evil model 'sq' \"dq\" $(touch {MARK}-m1) `touch {MARK}-m2`; touch {MARK}-m3 & echo x | tee {MARK}-m4 > * \\"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _payload(where: str, tag: str) -> str:
    """Every shell construct, each creating <where>/sfpwned-<tag>-N if a shell ever sees it."""
    m = f"{where}/{MARK}-{tag}"
    return (f"a b 'c' \"d\" $(touch {m}-1) `touch {m}-2`; touch {m}-3 && touch {m}-4 | tee {m}-5 > {m}-6 "
            f"$((1+1)) ${{HOME}} ~ * ?\nnext line; touch {m}-7")


@pytest.mark.root
@pytest.mark.fleet
@pytest.mark.docker
@pytest.mark.slow
def test_hostile_names_paths_and_args_reach_the_workload_literally(
        fleet_factory, test_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    host = fleet.hosts[0]
    results_root = Path(host.work_dir, "results")  # bind-mounted at the same path natively and in the container
    model_dir = Path(host.work_dir, "models", f"llama 'q' $(touch {MARK}-p1) `touch {MARK}-p2`; touch {MARK}-p3")
    model_dir.mkdir(parents=True)
    name = f"hostile{os.getpid()}"
    campaign = {
        "name": name,
        "image": test_image,
        "models": [{"name": MODEL, "path": str(model_dir)}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}],
        "workloads": [
            {"name": "trt", "preset": "T1", "requests": 2,
             "extra_args": ["--engine_dir", _payload(str(results_root), "arg")],  # opaque to the pytorch backend
             "env": {**FAST, "SPARKFLEET_HOSTILE": _payload(str(results_root), "env")}},
            {"name": "mm", "engine": "matmul", "size": 32, "iterations": 2, "warmup": 1,
             "env": {"SPARKFLEET_HOSTILE": _payload(str(results_root), "env2")}},
        ],
        "iterations": 1,
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 120,
    }
    path = tmp_path / "hostile.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    # validate checks the model's path against the hosts' models directory (this fake host's, not the default)
    assert sparkfleet_main(["validate", str(path), "--models-dir", str(Path(host.work_dir, "models"))]) == 0

    results = tmp_path / "results"
    proc = subprocess.run(
        ["ansible-playbook", "-i", fleet.inventory, "bench.yml", "-e", f"@{path}",
         "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
         "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
         "-e", "sparkfleet_preflight_min_free_disk_gib=1",
         "-e", json.dumps({"sparkfleet_drop_caches": False,
                           "gpu_state_state_file": "{{ sparkfleet_work_dir }}/run/gpu-state.json"})],
        cwd=repo, env=ansible_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

    # Nothing a shell would have made exists, anywhere the payloads could have run.
    places = [Path(host.dir), tmp_path, repo, Path("/tmp"), Path.home()]
    rootfs = list(Path(host.work_dir, "rootfs").glob("sha256-*"))
    for place in places + rootfs:
        found = [str(p) for p in (place.rglob(f"{MARK}-*") if place in (Path(host.dir), tmp_path)
                                  else place.glob(f"{MARK}-*"))]
        found = [f for f in found if not f.startswith(str(model_dir))]  # the model dir's own name holds MARK
        assert found == [], found
    for sub in ("tmp", "root"):  # the chroot's /tmp and home, where a shell inside it would have been
        for place in rootfs:
            assert not list((place / sub).glob(f"{MARK}-*"))

    planned = json.loads((results / name / "campaign.json").read_text())["hosts"][host.name]["run_ids"]
    records = [json.loads(p.read_text()) for p in (results / name / host.name / "runs").glob("*/record.json")]
    assert sorted(r["run_id"] for r in records) == sorted(planned) and len(records) == 4
    for rec in records:
        assert validate(rec) == [], validate(rec)
        assert rec["status"] == "ok", (rec["workload"], rec["environment"], rec["reason"])
        assert rec["model"] == MODEL and rec["model_loaded"] == MODEL  # the workload printed it literally
        assert RUN_ID.match(rec["run_id"]), rec["run_id"]
        run_dir = (results_root / name / host.name / "runs" / rec["run_id"]).resolve()
        assert run_dir.is_dir() and run_dir.is_relative_to(results_root.resolve())
        cmd = rec["command"]  # the argv bench_run launched: the hostile strings are single elements
        assert MODEL in cmd
        if rec["workload"] == "trt":
            assert cmd[-2:] == ["--engine_dir", _payload(str(results_root), "arg")]
            assert str(model_dir) in cmd
    for entry in Path(results_root, name, host.name, "runs").iterdir():
        assert entry.is_dir() and not entry.is_symlink() and RUN_ID.match(entry.name), entry
    for dirpath, dirnames, filenames in os.walk(results / name):  # the collected tree: no odd names either
        for item in dirnames + filenames:
            assert MARK not in item and "$(" not in item and "`" not in item, os.path.join(dirpath, item)


@pytest.mark.parametrize("field,value", [
    ("models", [{"name": "llama\n$(touch /tmp/sfpwned-nl)"}]),
    ("models", ["qwen\nrm -rf /"]),
    ("environments", [{"name": "native\nx", "kind": "native"}]),
    ("workloads", [{"name": "t1\n; reboot", "preset": "T1"}]),
    ("models", [{"name": "nul\x00byte"}]),
])
def test_newlines_in_names_are_refused_by_validate(tmp_path, capsys, field, value):
    campaign = {"name": "c", "models": ["m"], "environments": ["native"], "workloads": ["T1"], field: value}
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(campaign))
    assert sparkfleet_main(["validate", str(path)]) == 2
    assert "contains a newline/NUL" in capsys.readouterr().err


def _tar(path: Path, members: list[tuple[str, str, str]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data.encode())
                tar.addfile(info, io.BytesIO(data.encode()))
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, data
                tar.addfile(info)
    return path


def _results_unpack(archive: Path, campaign_dir: Path) -> subprocess.CompletedProcess:
    """Collect's unpack step: the sparkfleet.bench.results_unpack action, run ad hoc on the controller."""
    repo = Path(__file__).resolve().parents[2]
    args = json.dumps({"archive": str(archive), "campaign_dir": str(campaign_dir), "host": "h1"})
    env = {**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-m", "sparkfleet.bench.results_unpack", "-a", args],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("member", [
    ("h1/../../escaped.txt", "file", "x"),
    ("/tmp/sfpwned-absolute.txt", "file", "x"),
    ("h1/runs/r/record.json", "symlink", "/etc/passwd"),
    ("h1/runs/r/record.json", "hardlink", "/etc/passwd"),
    ("other-host/runs/r/record.json", "file", "{}"),
])
def test_unpack_refuses_hostile_members_and_writes_nothing(tmp_path, member):
    campaign_dir = tmp_path / "results" / "c"
    archive = _tar(tmp_path / "h1.tgz", [("h1/runs/ok/record.json", "file", "{}"), member])
    proc = _results_unpack(archive, campaign_dir)
    assert proc.returncode != 0 and "refusing archive member" in proc.stdout, proc.stdout + proc.stderr
    assert not (campaign_dir / "h1" / "runs" / "ok").exists()  # checked before anything is written
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/sfpwned-absolute.txt").exists()


def test_unpack_refuses_the_collect_roles_tar_of_a_tree_with_a_symlink(tmp_path):
    """The archive as roles/collect packs it (`tar -czf ... -C <campaign dir> <host>`), from a host whose
    results tree holds a link out of it: refused, nothing outside the host dir written."""
    host_side = tmp_path / "host" / "c"
    run = host_side / "h1" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "bench.log").write_text("log\n")
    (run / "record.json").symlink_to("/etc/hostname")
    archive = tmp_path / "h1.tgz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(host_side), "--exclude=*.partial", "h1"], check=True)
    campaign_dir = tmp_path / "controller" / "c"
    proc = _results_unpack(archive, campaign_dir)
    assert proc.returncode != 0 and "links are not allowed" in proc.stdout, proc.stdout + proc.stderr
    assert not (campaign_dir / "h1" / "runs").exists()
