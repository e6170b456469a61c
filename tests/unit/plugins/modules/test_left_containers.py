"""Run containers a job could not remove (Docker was down, the job was killed) are removed by the next job and by
bench_stop (restore.yml); where Docker cannot be asked, the clean-up says why and fails nothing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from _ansible_modules import host_util, load_module, run_module

jobs = host_util("jobs")

# A docker CLI standing in for the daemon's container list: `ps` prints the names in containers.json whose labels
# match every --filter; `rm -f NAME` deletes it. Exits 1 ("Cannot connect") when down.flag exists.
FAKE_DOCKER = """#!/usr/bin/env python3
import json, sys
from pathlib import Path
here = Path(__file__).parent
if (here / "down.flag").exists():
    print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", file=sys.stderr)
    sys.exit(1)
state = json.loads((here / "containers.json").read_text())
args = sys.argv[1:]
if args[0] == "ps":
    wanted = [args[i + 1].split("=", 1)[1] for i, a in enumerate(args) if a == "--filter"]
    for name, labels in state.items():
        pairs = {f"{k}={v}" for k, v in labels.items()} | set(labels)
        if all(w in pairs for w in wanted):
            print(name)
elif args[0] == "rm":
    state.pop(args[-1], None)
    (here / "containers.json").write_text(json.dumps(state))
"""


def _docker(tmp_path: Path, containers: dict) -> str:
    cli = tmp_path / "docker"
    cli.write_text(FAKE_DOCKER)
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "containers.json").write_text(json.dumps(containers))
    return str(cli)


def _left(tmp_path: Path) -> set:
    return set(json.loads((tmp_path / "containers.json").read_text()))


ROOT = "/var/lib/sparkfleet/results"
CONTAINERS = {
    "run-a1": {"sparkfleet.run_id": "a1", "sparkfleet.campaign": "a", "sparkfleet.results_root": ROOT},
    "run-a2": {"sparkfleet.run_id": "a2", "sparkfleet.campaign": "a", "sparkfleet.results_root": ROOT},
    "run-b1": {"sparkfleet.run_id": "b1", "sparkfleet.campaign": "b", "sparkfleet.results_root": ROOT},
    # the same daemon serving another results root (another install, a test fleet's other host)
    "other-root": {"sparkfleet.run_id": "a1", "sparkfleet.campaign": "a", "sparkfleet.results_root": "/srv/x"},
    "someone-elses": {"app": "web"},
}


def test_a_campaigns_left_containers_go_and_nothing_else(tmp_path):
    docker = _docker(tmp_path, CONTAINERS)
    done = jobs.remove_left_containers(docker, ROOT, "a", keep=["run-a2"])
    assert done == {"removed": ["run-a1"], "error": None}
    assert _left(tmp_path) == {"run-a2", "run-b1", "other-root", "someone-elses"}
    assert jobs.remove_left_containers(docker, ROOT)["removed"] == ["run-a2", "run-b1"]
    # never a container sparkfleet did not label, nor one of another results root
    assert _left(tmp_path) == {"other-root", "someone-elses"}


def test_docker_down_is_said_not_fatal(tmp_path):
    docker = _docker(tmp_path, CONTAINERS)
    (tmp_path / "down.flag").touch()
    done = jobs.remove_left_containers(docker, ROOT, "a")
    assert done["removed"] == [] and "Cannot connect" in done["error"]
    assert jobs.remove_left_containers(str(tmp_path / "no-such-docker"), ROOT)["error"]


def test_bench_stop_removes_them_once_docker_is_back(tmp_path):
    docker = _docker(tmp_path, CONTAINERS)
    (tmp_path / "down.flag").touch()
    bench_stop = load_module("bench_stop")
    args = {"results_root": ROOT, "docker": docker, "campaign": "a"}
    down = run_module(bench_stop, args)
    assert not down.get("failed") and down["containers_error"] and _left(tmp_path) == set(CONTAINERS)
    (tmp_path / "down.flag").unlink()
    back = run_module(bench_stop, args)
    assert back["changed"] and sorted(back["containers_removed"]) == ["run-a1", "run-a2"]
