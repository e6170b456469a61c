"""Host facts (issue 23): the CPU model from lscpu/DMI, never a count; the Docker engine and the NVIDIA container
toolkit versions recorded (null where absent). Parsers on the tools' own output, the module on a host whose
tools are given, and host.json as the host_facts role writes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _ansible_modules import host_util

hostinfo = host_util("hostinfo")
REPO = Path(__file__).resolve().parents[4]
FIX = REPO / "tests" / "fixtures" / "host"
BIN = Path(sys.executable).parent


def fixture(name: str) -> str:
    return (FIX / name).read_text()


# ------------------------------------------------------------------------------------------- CPU model


def test_the_cpu_model_of_an_aarch64_gb10_names_both_core_types_not_a_count():
    got = hostinfo.cpu_model(fixture("lscpu-aarch64-gb10.txt"), fixture("cpuinfo-aarch64-gb10-head.txt"))
    assert got == {"cpu_model": "Cortex-X925 + Cortex-A725", "cpu_model_source": "lscpu"}


def test_the_cpu_model_of_an_x86_machine_from_lscpu():
    assert hostinfo.cpu_model(fixture("lscpu-x86_64-this-build-machine.txt")) == {
        "cpu_model": "AMD EPYC", "cpu_model_source": "lscpu"}


def test_lscpu_without_a_model_name_falls_back_to_dmi_then_cpuinfo_and_never_to_a_number():
    grace = "Architecture: aarch64\nVendor ID: ARM\nModel name: -\nBIOS Vendor ID: NVIDIA\nBIOS Model name: Grace A02\n"
    assert hostinfo.cpu_model(grace) == {"cpu_model": "Grace A02", "cpu_model_source": "lscpu-bios"}
    cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nprocessor\t: 1\n"
    assert hostinfo.cpu_model("", cpuinfo) == {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                                                "cpu_model_source": "cpuinfo"}
    # arm64's /proc/cpuinfo has processor numbers and no model name: unknown, not "2"
    assert hostinfo.cpu_model(None, fixture("cpuinfo-aarch64-gb10-head.txt")) == {
        "cpu_model": None, "cpu_model_source": None}
    assert hostinfo.cpu_model("Model name: 2\n") == {"cpu_model": None, "cpu_model_source": None}


# ----------------------------------------------------------------------------- Docker, container toolkit


def test_the_docker_engine_is_the_servers_version():
    got = hostinfo.docker_version(fixture("docker-version-debian-docker.io.json"))
    assert got == {"engine": "20.10.24+dfsg1", "api_version": "1.41", "platform": None, "os_arch": "linux/amd64",
                   "containerd": "1.6.20~ds1", "runc": "1.1.5+ds1", "client": "28.2.2"}


@pytest.mark.parametrize("text", [fixture("docker-version-no-daemon.json"), "", None, "Cannot connect", "[]"])
def test_no_docker_server_is_null(text):
    assert hostinfo.docker_version(text) is None


def test_nvidia_container_toolkit_versions():
    assert hostinfo.nvidia_ctk_version(fixture("nvidia-ctk-version-1.17.8.txt")) == "1.17.8"
    assert hostinfo.nvidia_container_cli_version(fixture("nvidia-container-cli-version-1.17.8.txt")) == {
        "cli": "1.17.8", "lib": "1.17.8"}
    assert hostinfo.nvidia_ctk_version("") is None and hostinfo.nvidia_container_cli_version(None) is None


# --------------------------------------------------------------------- host.json from the host_facts role


def _tools(bin_dir: Path, present: bool) -> None:
    """The host's tools, printing the fixtures' output: lscpu always; docker and the toolkit when present,
    else a docker whose daemon does not answer (its client's JSON, "Server": null, rc 1) and no toolkit."""
    bin_dir.mkdir()
    outputs = {"lscpu": ("lscpu-aarch64-gb10.txt", 0)}
    if present:
        outputs.update({"docker": ("docker-version-debian-docker.io.json", 0),
                        "nvidia-ctk": ("nvidia-ctk-version-1.17.8.txt", 0),
                        "nvidia-container-cli": ("nvidia-container-cli-version-1.17.8.txt", 0)})
    else:
        outputs["docker"] = ("docker-version-no-daemon.json", 1)
    for tool, (name, rc) in outputs.items():
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\ncat {FIX / name}\nexit {rc}\n")
        script.chmod(0o755)


@pytest.mark.parametrize("present", [True, False])
def test_host_json_records_the_cpu_model_docker_and_the_toolkit(tmp_path, present):
    _tools(tmp_path / "bin", present)
    playbook = tmp_path / "facts.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "roles": [{"role": "sparkfleet.bench.host_facts",
                   "sparkfleet_plan": {"paths": {"results_dir": str(tmp_path / "out")}}}]}]))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    # only the fixtures' tools and the basics: no real docker, nvidia-smi or toolkit of this machine
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PATH=path,
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    host = json.loads((tmp_path / "out" / "host.json").read_text())
    assert host["cpu_model"] == "Cortex-X925 + Cortex-A725" and host["cpu_model_source"] == "lscpu"
    if present:
        assert host["docker"]["engine"] == "20.10.24+dfsg1" and host["docker_error"] == ""
        assert host["nvidia_container_toolkit"] == {"nvidia_ctk": "1.17.8",
                                                    "nvidia_container_cli": {"cli": "1.17.8", "lib": "1.17.8"}}
    else:
        assert host["docker"] is None and "rc=1" in host["docker_error"]
        assert host["nvidia_container_toolkit"] == {"nvidia_ctk": None, "nvidia_container_cli": None}


def test_the_fleet_compares_the_docker_engine_and_toolkit_versions_across_hosts(tmp_path):
    import pandas as pd

    from sparkfleet import fleet_state

    dirs = {}
    for host, engine, ctk in (("h1", "28.3.3", "1.17.8"), ("h2", "27.5.1", None)):
        dirs[host] = tmp_path / host
        dirs[host].mkdir()
        (dirs[host] / "host.json").write_text(json.dumps({
            "cpu_model": "Cortex-X925 + Cortex-A725", "docker": {"engine": engine},
            "nvidia_container_toolkit": {"nvidia_ctk": ctk, "nvidia_container_cli": None}}))
    facts = fleet_state.facts_of(dirs)
    assert facts.loc["h1", "docker_engine"] == "28.3.3" and facts.loc["h2", "docker_engine"] == "27.5.1"
    assert facts.loc["h1", "nvidia_container_toolkit"] == "1.17.8"
    assert facts.loc["h2", "nvidia_container_toolkit"] is None or pd.isna(facts.loc["h2", "nvidia_container_toolkit"])
    assert set(facts.loc["h1", ["cpu_model"]]) == {"Cortex-X925 + Cortex-A725"}
