"""bootstrap.sh installs Debian's docker.io only where there is no Docker at all (issue 33): an engine already
installed (docker-ce and containerd.io from Docker's or NVIDIA's repositories, moby-engine, docker.io, or a
dockerd on PATH) is reused, never replaced by a conflicting package. bootstrap.sh's own function runs
here, sourced, with a fake dpkg-query and a PATH of fakes alone: nothing of this machine is asked or changed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")

# dpkg-query -W -f='${Status}' PKG, answered from a table (tab-separated name and status); shell builtins only,
# since PATH holds nothing but the fakes.
FAKE_DPKG_QUERY = """#!/bin/sh
for pkg; do :; done
while IFS='\t' read -r name status; do
  if [ "$name" = "$pkg" ]; then printf '%s' "$status"; exit 0; fi
done < "$FAKE_DPKG_DB"
echo "dpkg-query: no packages found matching $pkg" >&2
exit 1
"""
INSTALLED = "install ok installed"

# (packages dpkg knows with their status, programs on PATH, what bootstrap.sh installs)
CASES = {
    "nothing": ({}, [], ["docker.io"]),
    "docker-ce (DGX OS)": ({"docker-ce": INSTALLED, "docker-ce-cli": INSTALLED, "containerd.io": INSTALLED}, [], []),
    "containerd.io alone": ({"containerd.io": INSTALLED}, [], []),
    "docker.io": ({"docker.io": INSTALLED}, [], []),
    "moby-engine": ({"moby-engine": INSTALLED}, [], []),
    "docker.io removed, its configuration kept": ({"docker.io": "deinstall ok config-files"}, [], ["docker.io"]),
    "a dockerd on PATH, no package": ({}, ["dockerd"], []),
    # a static client alone (CI's /usr/local/bin/docker) is no engine, and docker.io conflicts with no package
    "a docker client on PATH, no package": ({}, ["docker"], ["docker.io"]),
    "docker-ce-cli alone (a remote engine)": ({"docker-ce-cli": INSTALLED}, [], []),
    "other packages only": ({"python3": INSTALLED, "containerd": INSTALLED}, [], ["docker.io"]),
}


def decide(tmp_path: Path, packages: dict[str, str], programs: list[str]) -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in {"dpkg-query": FAKE_DPKG_QUERY, **dict.fromkeys(programs, "#!/bin/sh\nexit 0\n")}.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    db = tmp_path / "dpkg.tsv"
    db.write_text("".join(f"{name}\t{status}\n" for name, status in packages.items()))
    return subprocess.run([BASH, "-c", 'source "$1"; docker_to_install', "bash", str(REPO / "bootstrap.sh")],
                          env={"PATH": str(bindir), "FAKE_DPKG_DB": str(db)}, capture_output=True, text=True,
                          check=True, timeout=30)


@pytest.mark.parametrize("case", list(CASES))
def test_docker_io_only_where_there_is_no_docker_at_all(tmp_path, case):
    packages, programs, expected = CASES[case]
    proc = decide(tmp_path, packages, programs)
    assert proc.stdout.split() == expected, proc.stderr
    if not expected:  # what was found and reused is said
        assert "reused" in proc.stderr


def test_both_modes_install_docker_only_through_the_decision():
    code = [line for line in (REPO / "bootstrap.sh").read_text().splitlines() if not line.lstrip().startswith("#")]
    installs = [line for line in code if "apt_install " in line and not line.lstrip().startswith("apt_install()")]
    assert len(installs) == 3  # bench, test, and the quick path (base packages only: it needs no Docker)
    assert not any(re.search(r"\bdocker\.io\b", line) for line in installs)
    with_docker = [line for line in installs if "docker" in line]
    assert len(with_docker) == 2 and all('${docker_pkg:+"$docker_pkg"}' in line for line in with_docker)
    assert sum(line.strip() == "docker_pkg=$(docker_to_install)" for line in code) == 2
