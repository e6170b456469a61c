#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: run one command inside an extracted rootfs, with the image's own clean environment."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chroot_command
short_description: Runs a command in a container rootfs through chroot, with the image's environment
description:
  - Runs O(argv) as C(chroot ROOTFS /usr/bin/env -i [-C CWD] -- K=V... [ENTRYPOINT...] ARGV...) - the argv
    list is passed as it is, never through a shell. Like C(docker run IMAGE ARGV), the image's entrypoint
    (recorded in the rootfs marker) runs with O(argv) as its arguments, in the image's working directory
    unless O(cwd) is given (see O(entrypoint)).
  - The environment is only what C(docker run) would give - C(HOME=/root) unless the image sets it, the image's
    config environment (C(Config.Env), from the rootfs marker C(.sparkfleet-rootfs.json) unless O(image_env)
    is given), then O(env).
  - Fails when the command exits non-zero (unless O(expect_rc) says otherwise), with its output in the message.
version_added: "0.1.0"
options:
  rootfs:
    description:
      - The extracted rootfs, with its mounts in place (M(sparkfleet.bench.chroot_mounts)).
    type: path
    required: true
  argv:
    description:
      - Program and arguments. The program is looked up on the image's C(PATH).
    type: list
    elements: str
    required: true
  env:
    description:
      - Variables added to (or overriding) the image's environment.
    type: dict
    default: {}
  image_env:
    description:
      - The image environment as C(K=V) strings; read from the rootfs marker when omitted.
    type: list
    elements: str
  cwd:
    description:
      - Working directory inside the rootfs (C(env -C)); C(/) when omitted.
    type: str
  timeout:
    description:
      - Seconds before the command is killed; 0 waits for ever.
    type: int
    default: 0
  expect_rc:
    description:
      - Exit codes that count as success.
    type: list
    elements: int
    default: [0]
  entrypoint:
    description:
      - Run O(argv) through the image's entrypoint, as C(docker run) does (V(false) is C(docker run --entrypoint ARGV0)).
        A rootfs whose marker does not record the entrypoint (provisioned by an older version) runs O(argv)
        directly, with a warning.
    type: bool
    default: true
notes:
  - Needs root (chroot(2)). Reports C(changed) V(true) whenever the command ran, like M(ansible.builtin.command);
    set C(changed_when) on a probe. Skipped in check mode.
attributes:
  check_mode:
    support: partial
    description: Supported.
    details: The command is not run in check mode.
  diff_mode:
    support: none
    description: Shows no diff.
seealso:
  - module: sparkfleet.bench.chroot_mounts
  - module: ansible.builtin.command
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Is TensorRT-LLM importable in the rootfs?
  become: true
  sparkfleet.bench.chroot_command:
    rootfs: "{{ native_rootfs_path }}"
    argv: [python3, -c, "import tensorrt_llm; print(tensorrt_llm.__version__)"]
  changed_when: false
"""

RETURN = r"""
cmd:
  description: The full argv that ran (chroot, env and all).
  returned: always
  type: list
  elements: str
rc:
  description: Exit code of the command (-N when killed by signal N).
  returned: when the command ran
  type: int
stdout:
  description: Standard output.
  returned: when the command ran
  type: str
stderr:
  description: Standard error.
  returned: when the command ran
  type: str
env:
  description: The environment the command got.
  returned: always
  type: dict
"""

import os  # noqa: E402
import subprocess  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs.chroot import (  # noqa: E402
    ChrootError,
    chroot_argv,
    launch_env,
    load_image_config,
    load_image_env,
    stale_marker_warning,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            rootfs=dict(type="path", required=True),
            argv=dict(type="list", elements="str", required=True),
            env=dict(type="dict", default={}),
            image_env=dict(type="list", elements="str"),
            cwd=dict(type="str"),
            timeout=dict(type="int", default=0),
            expect_rc=dict(type="list", elements="int", default=[0]),
            entrypoint=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rootfs = os.path.realpath(p["rootfs"])
    try:
        image_env = p["image_env"] if p["image_env"] is not None else load_image_env(rootfs)
        chroot = module.get_bin_path("chroot", opt_dirs=["/usr/sbin", "/sbin"]) or "chroot"
        config = None
        if p["entrypoint"]:
            config = load_image_config(rootfs)
            note = stale_marker_warning(rootfs, config)
            if note:
                module.warn(note)
        cmd = chroot_argv(rootfs, image_env, p["argv"], extra_env=p["env"], cwd=p["cwd"], chroot=chroot,
                          config=config)
        env = launch_env(image_env, p["env"])
    except (ChrootError, ValueError, TypeError) as exc:
        module.fail_json(msg=str(exc))
    result: dict[str, Any] = dict(changed=False, cmd=cmd, env=env)
    if module.check_mode:
        module.exit_json(skipped=True, msg="not run in check mode", **result)
    if os.geteuid() != 0:
        module.fail_json(msg="running a command through chroot needs root (become: true)", **result)
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=p["timeout"] or None,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    except subprocess.TimeoutExpired as exc:
        module.fail_json(msg=f"{p['argv'][0]} in {rootfs} timed out after {p['timeout']} s",
                         stdout=(exc.stdout or b"").decode(errors="replace"),
                         stderr=(exc.stderr or b"").decode(errors="replace"), **result)
    except OSError as exc:
        module.fail_json(msg=f"cannot run chroot: {exc}", **result)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    result.update(changed=True, rc=proc.returncode, stdout=out, stderr=err,
                  stdout_lines=out.splitlines(), stderr_lines=err.splitlines())
    if proc.returncode not in p["expect_rc"]:
        detail = (err.strip() or out.strip())[-1500:]
        module.fail_json(msg=f"{' '.join(p['argv'])} failed in {rootfs} (rc={proc.returncode}): {detail}", **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
