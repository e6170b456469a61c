#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Attest a host once per campaign (issue 24): software and firmware identity, memory state, memory bandwidth; the
work is sparkfleet_host.health.host_attest."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_attest
short_description: Record a host's kernel, driver, CUDA, VBIOS, system firmware and achievable memory bandwidth
version_added: 0.1.0
description:
  - "The host attestation the preflight writes to C(attestation.json): the kernel release, C(nvidia-smi -q)
    (driver, CUDA, each GPU's name, VBIOS, clocks, clock event reasons and their counters), the system firmware
    from C(fwupdmgr get-devices --json) or, where fwupd is absent, the DMI/BIOS strings of
    C(/sys/class/dmi/id) (C(dmidecode -t bios -t system -t baseboard) for a field sysfs leaves empty), the image
    digest the runs use, MemFree/MemAvailable/Cached and the free 2 MiB blocks of C(/proc/buddyinfo). Parsed by
    the host code's attestation module; a command that is absent or fails leaves its part null and is named
    in the C(missing) list of RV(attestation) and in RV(errors)."
  - "The achievable memory bandwidth, measured once: a device-to-device copy through torch or cupy
    (C(gpu_probe.py bandwidth), run with O(python)); without either, or without O(probe_script), the
    bandwidth is null with the reason (the documented fallback: no CPU figure stands in for the GPU's)."
  - Reads only (the bandwidth copy allocates two buffers on the GPU for a second); it runs the same in check
    mode, so the files the preflight writes do not depend on it.
options:
  image_digest:
    description: The image the runs use (its ID or digest), recorded as given.
    type: str
  nvidia_smi:
    description: Name or path of nvidia-smi.
    type: str
    default: nvidia-smi
  fwupdmgr:
    description: Name or path of fwupdmgr; absent on the host means the DMI strings stand for the firmware.
    type: str
    default: fwupdmgr
  dmidecode:
    description: Name or path of dmidecode, run only for a DMI field sysfs does not give (it needs root).
    type: str
    default: dmidecode
  dmi_root:
    description: Directory of the DMI strings (tests point it at a fixture).
    type: path
    default: /sys/class/dmi/id
  proc_root:
    description: Where meminfo and buddyinfo are read (tests point it at a fixture).
    type: path
    default: /proc
  bandwidth:
    description: Measure the memory bandwidth with O(probe_script).
    type: bool
    default: true
  probe_script:
    description: Path on the host of C(gpu_probe.py) (the matrix role's file).
    type: path
  python:
    description: The interpreter that runs O(probe_script) (the host's, which may have torch or cupy).
    type: str
    default: python3
  bandwidth_mib:
    description: Size of the copied buffer in MiB.
    type: int
    default: 1024
  timeout_s:
    description: Time limit of each command, in seconds (the bandwidth run gets four times as long).
    type: float
    default: 30
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts; every tool is optional.
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.read_only
"""

EXAMPLES = r"""
- name: Attest the host and measure its memory bandwidth
  sparkfleet.bench.host_attest:
    image_digest: "{{ native_rootfs_digest | default(omit) }}"
    probe_script: "{{ sparkfleet_plan.paths.results_root }}/.sparkfleet/workloads/gpu_probe.py"
  register: host_metadata_attest

- name: Attest without measuring the bandwidth
  sparkfleet.bench.host_attest:
    bandwidth: false
"""

RETURN = r"""
attestation:
  description:
    - The host's attestation (the host code's attestation.attestation dict, format 1) - C(kernel),
      C(driver_version), C(cuda_version), C(image_digest), C(gpus) (per GPU C(product_name), C(vbios_version),
      clocks, C(clock_reasons_active), C(clock_event_counters_us), ...), the DMI fields (C(bios_vendor),
      C(bios_version), C(bios_date), C(board_name), C(product_name), C(sys_vendor)), C(firmware) (fwupd's
      devices, C(name), C(version), C(vendor), C(plugin), C(guids)) with C(firmware_source) (C(fwupd), C(dmi)
      or null), the memory state (C(mem_free_kib), C(mem_available_kib), C(cached_kib), C(free_huge_blocks),
      ...), and C(missing), the inputs that could not be read.
  returned: always
  type: dict
  sample:
    format: 1
    kernel: 6.11.0-1016-nvidia
    driver_version: 580.95.05
    cuda_version: "13.0"
    gpus: [{product_name: NVIDIA GB10, vbios_version: 9A.0B.25.00.00}]
    bios_version: 5.36_0ACUM018
    firmware_source: dmi
    free_huge_blocks: 21480
    missing: [fwupd]
bandwidth:
  description:
    - The device-to-device copy - C(bandwidth_bytes_s) (bytes read and written per second, null without a GPU
      library), C(bytes_copied), C(seconds), C(iterations), C(backend), C(device), C(method), and C(error) (why
      the figure is null).
  returned: always
  type: dict
  sample: {bandwidth_bytes_s: 3.0e12, backend: torch, device: "cuda:0 NVIDIA H100 80GB HBM3", error: null}
errors:
  description: One line per command that was absent or failed.
  returned: always
  type: list
  elements: str
  sample: ["fwupdmgr: not found on PATH"]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import host_attest


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            image_digest=dict(type="str"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            fwupdmgr=dict(type="str", default="fwupdmgr"),
            dmidecode=dict(type="str", default="dmidecode"),
            dmi_root=dict(type="path", default="/sys/class/dmi/id"),
            proc_root=dict(type="path", default="/proc"),
            bandwidth=dict(type="bool", default=True),
            probe_script=dict(type="path"),
            python=dict(type="str", default="python3"),
            bandwidth_mib=dict(type="int", default=1024),
            timeout_s=dict(type="float", default=30),
        ),
        supports_check_mode=True,
    )
    task.exit_with(module, host_attest.report)


if __name__ == "__main__":
    main()
