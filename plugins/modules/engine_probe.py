#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Read an image's TensorRT-LLM version and trtllm-bench surface from its files, without starting it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_probe
short_description: Read the TensorRT-LLM version and trtllm-bench CLI surface of an image without starting it
version_added: 0.1.0
description:
  - "Reads the image's TensorRT-LLM version from its files: C(tensorrt_llm/version.py) (C(__version__)), else
    the C(tensorrt_llm-*.dist-info/METADATA), else C(tensorrt_llm/__init__.py), under the image's python
    library directories (C(/usr/local/lib/python3.*/dist-packages), ...). Its CLI surface likewise: whether
    C(trtllm-bench prepare-dataset) exists (C(tensorrt_llm/bench/dataset/prepare_dataset.py)), whether the image
    carries the standalone C(/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py), and the LLM API options
    flag the benchmark sources spell."
  - "From O(rootfs) when that directory exists (the native rootfs extracted from the image), else from
    O(image): C(docker create) (never started; its entrypoint replaced by a path that does not exist) and
    C(docker cp) of the few candidate files into a temporary directory, then C(docker rm)."
  - "The result is what M(sparkfleet.bench.bench_run) takes as its O(sparkfleet.bench.bench_run#module:trtllm)
    option: every trtllm run's commands are built for that version. A version sparkfleet does not support
    fails the task naming it and the supported ones (O(unknown_version=refuse)), or is returned with the
    nearest profile and a warning (O(unknown_version=warn)); it is never guessed silently."
options:
  rootfs:
    description: The image's extracted root filesystem on the host; used when it is a directory.
    type: path
  image:
    description: The image (ID, digest or tag) to read when O(rootfs) is not a directory. Never pulled.
    type: str
  docker:
    description: Docker CLI.
    type: str
    default: docker
  unknown_version:
    description: What a version that no profile lists does - C(refuse) (fail) or C(warn) (nearest profile).
    type: str
    choices: [refuse, warn]
    default: refuse
  hf_cache_dir:
    description: A Hugging Face cache on the host the runs bind (null - runs are offline); passed on in RV(trtllm).
    type: path
  runs:
    description:
      - The host's planned runs (M(sparkfleet.bench.bench_run)'s O(sparkfleet.bench.bench_run#module:runs)).
        When given and none is a trtllm run, nothing is read and RV(trtllm) is empty.
    type: list
    elements: dict
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode, where an image not present yet returns an empty C(trtllm).
  diff_mode:
    support: none
    description: Not supported.
  platform:
    support: full
    platforms: posix
    description: Linux hosts; O(image) needs the docker CLI and daemon.
notes:
  - Nothing of the image runs; the container made for C(docker cp) is removed again.
seealso:
  - module: sparkfleet.bench.bench_run
author:
  - sparkfleet contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Read the TensorRT-LLM version of the native rootfs (or of the image when there is none)
  sparkfleet.bench.engine_probe:
    rootfs: "{{ native_rootfs_path | default('') }}"
    image: "{{ native_rootfs_digest }}"
    unknown_version: "{{ sparkfleet_trtllm_unknown_version }}"
    runs: "{{ sparkfleet_plan.runs }}"
  register: trtllm_probe
"""

RETURN = r"""
trtllm:
  description: The detection, as bench_run's O(sparkfleet.bench.bench_run#module:trtllm) option takes it.
  returned: success
  type: dict
  contains:
    version:
      description: The TensorRT-LLM version the image's files name.
      type: str
    profile:
      description: The supported profile its commands are built with (the nearest one when warned).
      type: str
    supported:
      description: Whether the version is one sparkfleet supports.
      type: bool
    surface:
      description: prepare_dataset_subcommand, prepare_dataset_script (path in the image), config_flag, latency_options_file.
      type: dict
    sources:
      description: Paths inside the image the facts were read from.
      type: dict
    unknown_version:
      description: The policy it was read with.
      type: str
    hf_cache_dir:
      description: O(hf_cache_dir), passed on.
      type: str
  sample:
    version: 1.1.0rc3
    profile: "1.1"
    supported: true
    surface: {prepare_dataset_subcommand: false, prepare_dataset_script: /app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py}
    sources: {version: /usr/local/lib/python3.12/dist-packages/tensorrt_llm/version.py}
summary:
  description: One line - the version, its profile, how the dataset is made and the options flag (or why nothing was read).
  returned: always
  type: str
  sample: "TensorRT-LLM 1.1.0rc3 (profile 1.1): dataset by /app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py --stdout, options flag --extra_llm_api_options"
warnings_list:
  description: Warnings about the version (an unsupported version run with the nearest profile).
  returned: always
  type: list
  elements: str
"""

import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import trtllm_cli


def _from_image(module: AnsibleModule, docker: str, image: str) -> dict:
    """docker create (never started) + docker cp of the candidate files into a temporary root."""
    proc = subprocess.run([docker, "create", "--network", "none", "--entrypoint", "/sparkfleet-never-started",
                           image], capture_output=True, text=True, errors="replace")
    if proc.returncode != 0 and module.check_mode:  # not provisioned yet: nothing to read, nothing refused
        module.exit_json(changed=False, trtllm={}, warnings_list=["engine_probe: check mode: image %s is not "
                                                                  "readable yet; version not read" % image])
    if proc.returncode != 0:
        module.fail_json(msg="engine_probe: docker create %s failed: %s" % (image, proc.stderr.strip()[-500:]))
    cid = proc.stdout.strip()
    tmp = tempfile.mkdtemp(prefix="sparkfleet-engine-probe-")
    try:
        for path in trtllm_cli.candidate_files():
            dest = os.path.join(tmp, path.lstrip("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            subprocess.run([docker, "cp", "%s:%s" % (cid, path), dest], capture_output=True)
        found = trtllm_cli.detect(tmp)
        found["root"] = None
        return found
    finally:
        subprocess.run([docker, "rm", "-f", cid], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rootfs=dict(type="path"),
            image=dict(type="str"),
            docker=dict(type="str", default="docker"),
            unknown_version=dict(type="str", choices=["refuse", "warn"], default="refuse"),
            hf_cache_dir=dict(type="path"),
            runs=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["runs"] is not None and not any(isinstance(r, dict) and (r.get("workload") or {}).get("engine", "trtllm")
                                         == "trtllm" for r in p["runs"]):
        module.exit_json(changed=False, trtllm={}, summary="no trtllm runs planned: nothing read", warnings_list=[])
    if p["rootfs"] and os.path.isdir(p["rootfs"]):
        found = trtllm_cli.detect(p["rootfs"])
        where = "rootfs %s" % p["rootfs"]
    elif p["image"]:
        found = _from_image(module, p["docker"], p["image"])
        where = "image %s" % p["image"]
    else:
        module.fail_json(msg="engine_probe: give rootfs (an existing directory) or image")
    found["unknown_version"] = p["unknown_version"]
    found["hf_cache_dir"] = p["hf_cache_dir"]
    try:
        resolved = trtllm_cli.resolve(found, p["unknown_version"])
    except trtllm_cli.TrtllmCliError as exc:
        module.fail_json(msg="engine_probe: %s: %s" % (where, exc), trtllm=found)
    found["profile"] = resolved["profile"]
    for warning in resolved["warnings"]:
        module.warn(warning)
    maker = ("trtllm-bench prepare-dataset" if resolved["dataset"] == "subcommand"
             else "%s --stdout" % resolved["script_path"])
    summary = "TensorRT-LLM %s (profile %s): dataset by %s, options flag %s" % (
        resolved["version"], resolved["profile"], maker, resolved["config_flag"])
    module.exit_json(changed=False, trtllm=found, summary=summary, warnings_list=resolved["warnings"])


if __name__ == "__main__":
    main()
