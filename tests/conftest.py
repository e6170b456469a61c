"""Shared pytest wiring: root-only tests, the fake fleet and the Docker test image.

Tests marked ``root`` need root because they create network namespaces, start sshd/dockerd and mount
file systems. Without root they are skipped with that reason (the header says so up front) and every
other test still runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from fakefleet import FakeFleet  # noqa: E402

IS_ROOT = os.geteuid() == 0
ROOT_REASON = ("needs root: the fake fleet creates network namespaces and veths, runs sshd and dockerd, "
               "and the chroot tests bind-mount file systems")


def pytest_report_header(config) -> list[str]:
    if IS_ROOT:
        return ["sparkfleet: running as root: fake-fleet, Docker and chroot tests enabled"]
    return [f"sparkfleet: NOT root: tests marked 'root' are skipped ({ROOT_REASON})"]


def pytest_collection_modifyitems(config, items) -> None:
    if IS_ROOT:
        return
    skip = pytest.mark.skip(reason=ROOT_REASON)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def ansible_env(tmp_path) -> dict[str, str]:
    """Environment for running ansible-playbook from a test: the repo's ansible.cfg, the venv first on PATH."""
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-local")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


@pytest.fixture
def fleet_factory(tmp_path_factory) -> Iterator:
    """Build fake fleets of N hosts; every fleet is torn down after the test, pass or fail."""
    made: list[FakeFleet] = []

    def make(n: int = 3, **kw) -> FakeFleet:
        base = tmp_path_factory.mktemp("fleet")
        fleet = FakeFleet.up(n, base, **kw)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.down()


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """A running Docker engine: the one already running, or one started (and stopped) here."""
    from testimage import ensure_dockerd, stop_dockerd

    if not shutil.which("dockerd") and not shutil.which("docker"):
        pytest.skip("Docker is not installed (Debian package docker.io)")
    started = ensure_dockerd()
    yield
    # Under pytest-xdist another worker may still be using the engine: leave it running.
    if started and not os.environ.get("PYTEST_XDIST_WORKER"):
        subprocess.run(["docker", "ps", "-aq", "--filter", "label=sparkfleet.test"], capture_output=True)
        stop_dockerd()


@pytest.fixture(scope="session")
def test_image(docker_engine) -> str:
    from testimage import ensure_test_image

    return ensure_test_image()


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """llama.cpp's llama-server, the CPU build of tests/fleet/llamacpp.py (built once, cached): skipped without the
    build tools."""
    from llamacpp import BuildError, ensure_llama_server, missing_tools

    if missing_tools():
        pytest.skip(f"building llama-server needs {', '.join(missing_tools())} (apt-get install cmake g++)")
    try:
        return ensure_llama_server()
    except BuildError as err:
        pytest.fail(str(err))
