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
  - "Reads the image's trtllm-bench command line from its files: the click definitions of
    C(tensorrt_llm/commands/bench.py) and of the modules it registers (C(bench/benchmark/throughput.py),
    C(low_latency.py), C(bench/dataset/prepare_dataset.py) and its subcommands), parsed as source, never imported
    or run; and the standalone C(/app/tensorrt_llm/benchmarks/cpp/prepare_dataset.py) where the image carries it.
    The TensorRT-LLM version (C(tensorrt_llm/version.py), else the C(tensorrt_llm-*.dist-info/METADATA), else
    C(tensorrt_llm/__init__.py)) is read too, as provenance."
  - "From O(rootfs) when that directory exists (the native rootfs extracted from the image), else from
    O(image): C(docker create) (never started; its entrypoint replaced by a path that does not exist) and
    C(docker cp) of the package's version files, its C(commands/) and C(bench/) directories and the standalone
    script into a temporary directory, then C(docker rm)."
  - "The result is what M(sparkfleet.bench.bench_run) takes as its O(sparkfleet.bench.bench_run#module:trtllm)
    option: every trtllm run's commands are built from that surface (the spellings it offers: C(--config) else
    C(--extra_llm_api_options); the C(prepare-dataset) subcommand else the image's script), whatever the version.
    When O(runs) are given, each planned trtllm workload's commands are checked against the surface here, before
    any run: a command or option the image's CLI lacks fails the task naming it."
  - "Where the image's command tree cannot be read (its sources laid out otherwise), the captured surface that
    covers the version, else the nearest one below it (the newest for a version past every capture), is used
    with a warning. Only a version older than every captured surface, whose CLI could not be read, fails the
    task (O(unknown_version=refuse)) or is built as for the oldest capture with a warning
    (O(unknown_version=warn)); nothing is guessed silently."
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
    description:
      - What a version older than every captured trtllm-bench surface does when the image's own CLI could not be
        read - C(refuse) (fail) or C(warn) (its commands built as for the oldest capture).
    type: str
    choices: [refuse, warn]
    default: refuse
  hf_cache_dir:
    description: A Hugging Face cache on the host the runs bind (null - runs are offline); passed on in RV(trtllm).
    type: path
  runs:
    description:
      - The host's planned runs (M(sparkfleet.bench.bench_run)'s O(sparkfleet.bench.bench_run#module:runs)).
        When given and none is a trtllm run, nothing is read and RV(trtllm) is empty; else each trtllm workload's
        commands are checked against the surface.
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
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Read the trtllm-bench CLI of the native rootfs (or of the image when there is none)
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
      description: The TensorRT-LLM version the image's files name (provenance; null when none was found).
      type: str
    profile:
      description: What the commands are built against - C(image) (its own CLI) or C(captured NAME).
      type: str
    surface:
      description:
        - C(read_from) (C(image)) and C(programs) - the command tree of C(trtllm-bench) and, where the image has
          it, of the standalone C(prepare_dataset.py) - as read from the image's click sources. Each level has
          C(options) (name to C(type), C(aliases), C(required), C(choices); null where unread) and C(commands).
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
    version: 1.3.0rc29
    profile: image
    surface: {read_from: image, programs: {trtllm-bench: {options: {--model: {type: str, required: true}}, commands: {}}}}
    sources: {version: /usr/local/lib/python3.12/dist-packages/tensorrt_llm/version.py}
summary:
  description: One line - the version, what the commands are built against, how the dataset is made and the options flag (or why nothing was read).
  returned: always
  type: str
  sample: "TensorRT-LLM 1.3.0rc29 (CLI read from the image): dataset by trtllm-bench prepare-dataset, options flag --config"
warnings_list:
  description: Warnings (a CLI that could not be read and the captured surface used instead; options a workload uses that the sources read do not show).
  returned: always
  type: list
  elements: str
"""

import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import trtllm_cli


def _copy(docker: str, cid: str, path: str, tmp: str) -> None:
    dest = os.path.join(tmp, path.lstrip("/"))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    subprocess.run([docker, "cp", "%s:%s" % (cid, path), dest], capture_output=True)


def _from_image(module: AnsibleModule, docker: str, image: str) -> dict:
    """docker create (never started) + docker cp of the version files, then of the package's CLI sources."""
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
        for path in trtllm_cli.version_candidates():
            _copy(docker, cid, path, tmp)
        package = trtllm_cli.detect(tmp)["sources"].get("package")
        for path in trtllm_cli.cli_paths(package) if package else list(trtllm_cli.SCRIPT_FILES):
            _copy(docker, cid, path, tmp)
        found = trtllm_cli.detect(tmp)
        found["root"] = None
        return found
    finally:
        subprocess.run([docker, "rm", "-f", cid], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _workloads(runs: list) -> list:
    """The distinct trtllm workloads of the planned runs."""
    seen, out = set(), []
    for run in runs or []:
        workload = (run or {}).get("workload") or {} if isinstance(run, dict) else {}
        key = repr(sorted((k, repr(v)) for k, v in workload.items()))
        if workload.get("engine", "trtllm") == "trtllm" and key not in seen:
            seen.add(key)
            out.append(workload)
    return out


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
    if p["runs"] is not None and not _workloads(p["runs"]):
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
    warnings = list(resolved["warnings"])
    missing = []
    for workload in _workloads(p["runs"]):
        lacks, unconfirmed = trtllm_cli.check(workload, resolved)
        missing += ["workload %r: %s" % (workload.get("name") or "?", m) for m in lacks]
        warnings += ["workload %r uses %s" % (workload.get("name") or "?", u) for u in unconfirmed]
    for warning in warnings:
        module.warn(warning)
    if missing:
        module.fail_json(msg="engine_probe: %s: %s lacks what the planned runs need: %s" % (
            where, trtllm_cli.who(resolved), "; ".join(missing)), trtllm=found, warnings_list=warnings)
    maker = ("trtllm-bench prepare-dataset" if resolved["dataset"] == "subcommand"
             else "%s --stdout" % resolved["script_path"])
    basis = "CLI read from the image" if resolved["profile"] == "image" else "%s surface" % resolved["profile"]
    summary = "TensorRT-LLM %s (%s): dataset by %s, options flag %s" % (
        resolved["version"], basis, maker, resolved["config_flag"])
    module.exit_json(changed=False, trtllm=found, summary=summary, warnings_list=warnings)


if __name__ == "__main__":
    main()
