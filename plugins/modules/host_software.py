#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Read a host's CPU model and its container software versions for host.json and host_metadata.json."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_software
short_description: Read the host's CPU model and its Docker and NVIDIA container toolkit versions
version_added: 0.1.0
description:
  - The CPU model from C(lscpu) (every distinct C(Model name); a GB10 has two core types), else its
    C(BIOS Model name) (the SMBIOS processor record), else C(/proc/cpuinfo)'s C(model name); never a count
    (Ansible's C(processor) fact holds only processor numbers on aarch64).
  - The Docker engine the containers run on, from C(docker version) (the server's version, API version,
    containerd and runc), and the NVIDIA container toolkit, from C(nvidia-ctk --version) and
    C(nvidia-container-cli --version). Each is null where the tool is absent or does not answer, with the
    reason; the study compares Docker with native, so these belong in each host's record.
  - Reads only; every command has a time limit.
options: {}
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts; each tool is optional.
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the CPU model and the container software versions
  sparkfleet.bench.host_software:
  register: host_facts_software
"""

RETURN = r"""
cpu_model:
  description: The CPU model; several core types joined with C( + ); null when no source names one.
  returned: always
  type: str
  sample: Cortex-X925 + Cortex-A725
cpu_model_source:
  description: Where RV(cpu_model) came from - C(lscpu), C(lscpu-bios), C(cpuinfo), or null.
  returned: always
  type: str
  sample: lscpu
docker:
  description: The Docker engine (server) - C(engine), C(api_version), C(platform), C(os_arch), C(containerd),
    C(runc), C(client); null without Docker or without an answering daemon.
  returned: always
  type: dict
  sample: {engine: 28.3.3, api_version: "1.51", containerd: 1.7.27, runc: 1.2.5, client: 28.3.3}
docker_error:
  description: Why RV(docker) is null (empty when it is not).
  returned: always
  type: str
  sample: docker not found on PATH
nvidia_container_toolkit:
  description: C(nvidia_ctk) (the C(nvidia-ctk) version) and C(nvidia_container_cli) (C(cli) and C(lib) of
    libnvidia-container), each null where absent.
  returned: always
  type: dict
  sample: {nvidia_ctk: 1.17.8, nvidia_container_cli: {cli: 1.17.8, lib: 1.17.8}}
"""

import os  # noqa: E402
import subprocess  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import hostinfo

TIMEOUT_S = 20


def _run(module, argv):
    """(rc, stdout, why it failed or ''): a missing tool or one that does not answer in time is not an error."""
    path = module.get_bin_path(argv[0])
    if path is None:
        return None, "", "%s not found on PATH" % argv[0]
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run([path] + list(argv[1:]), capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None, "", "%s did not answer within %d s" % (" ".join(argv), TIMEOUT_S)
    except OSError as exc:
        return None, "", "%s: %s" % (argv[0], exc)
    why = "" if proc.returncode == 0 else ("%s: rc=%d %s" % (" ".join(argv), proc.returncode,
                                                             proc.stderr.strip()[-300:])).strip()
    return proc.returncode, proc.stdout, why


def read(module):
    _, lscpu, _ = _run(module, ["lscpu"])
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            cpuinfo = fh.read()
    except OSError:
        cpuinfo = ""
    out = hostinfo.cpu_model(lscpu, cpuinfo)
    _, docker_json, why = _run(module, ["docker", "version", "--format", "{{json .}}"])
    out["docker"] = hostinfo.docker_version(docker_json)
    out["docker_error"] = "" if out["docker"] else (why or "docker version gave no server version")
    _, ctk, _ = _run(module, ["nvidia-ctk", "--version"])
    _, cli, _ = _run(module, ["nvidia-container-cli", "--version"])
    out["nvidia_container_toolkit"] = {"nvidia_ctk": hostinfo.nvidia_ctk_version(ctk),
                                       "nvidia_container_cli": hostinfo.nvidia_container_cli_version(cli)}
    return out


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, **read(module))


if __name__ == "__main__":
    main()
