#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: a rootfs for native (chroot) runs made as an overlay of a host directory (the host's own /); the
work is sparkfleet_host.rootfs.rootfs_overlay."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rootfs_overlay
short_description: Makes a chroot rootfs as an overlayfs of a host directory, for hosts where no image can be pulled
description:
  - With O(state=mounted), mounts C(overlay) with C(lowerdir=)O(lower) (default the host's C(/)),
    C(upperdir) and C(workdir) under C(ROOT/rootfs/.NAME.overlay/) at C(ROOT/rootfs/NAME) (see RV(path)), so
    that a chroot into it sees the host's own userland (Python, CUDA toolkit, site-packages) while everything it
    writes lands in the upper layer, never on the host.
  - An overlay takes only the file system of O(lower) itself - file systems mounted below it (C(/proc), C(/dev),
    a separately mounted driver directory such as C(/usr/local/nvidia)) show up as empty directories. The
    M(sparkfleet.bench.chroot_mounts) module brings in what a GPU program needs (device nodes, the driver libraries C(ldconfig -p)
    lists); RV(hidden_mounts) lists the other ones so they can be bound when a workload needs them.
  - Writes the rootfs marker C(.sparkfleet-rootfs.json) into the merged tree (so, into the upper layer) -
    C(source=overlay), the lower directory, and as C(env) the launch environment - the keys O(env_keys) of this
    module's own environment (C(PATH), C(LD_LIBRARY_PATH), ...) plus O(env) - which the chroot launcher
    (C(sparkfleet_chroot.load_image_env)) uses in place of an image's C(Config.Env).
  - Idempotent - an overlay already mounted there with the same layers is left alone, and the marker is rewritten
    only when its content changes. O(reset) discards the upper layer first (only when nothing is mounted).
  - With O(state=unmounted), unmounts everything under RV(path), then the overlay itself (deepest first).
    Usually the native_rootfs role's undo does this for every rootfs under C(ROOT/rootfs).
version_added: "0.1.0"
options:
  root:
    description:
      - Directory under which C(rootfs/) is kept (the work directory).
    type: path
    required: true
  lower:
    description:
      - The host directory the rootfs shows, read-only (the overlay's C(lowerdir)).
    type: path
    default: /
  name:
    description:
      - Directory name of the rootfs under C(ROOT/rootfs/). Default C(overlay-root) for C(/), else
        C(overlay-) and the lower path with C(/) turned into C(-).
    type: str
  env_keys:
    description:
      - Variables of this module's environment that the chroot keeps (names; a missing one is left out).
        Values holding a newline or NUL are dropped.
    type: list
    elements: str
    default: [PATH, LD_LIBRARY_PATH, LANG, LC_ALL, TZ, CUDA_HOME, CUDA_PATH, CUDA_VISIBLE_DEVICES,
              NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NCCL_NVLS_ENABLE,
              TORCH_SYMM_MEM_DISABLE_MULTICAST, NVSHMEM_DISABLE_NVLS]
  env:
    description:
      - Further variables for the chroot's environment (override those taken from O(env_keys)).
    type: dict
    default: {}
  reset:
    description:
      - Empty the upper layer before mounting (a fresh rootfs). Refused while the overlay is mounted.
    type: bool
    default: false
  state:
    description:
      - V(mounted) or V(unmounted).
    type: str
    choices: [mounted, unmounted]
    default: mounted
notes:
  - Needs root (mount(2)). The overlay lives in the mount namespace the module runs in.
  - The upper and work directories may lie inside O(lower) (the work dir on the host's root file system); the
    kernel then refuses lookups of them through the overlay (ELOOP), which nothing in the chroot needs.
  - Check mode reports what would be mounted or written.
seealso:
  - module: sparkfleet.bench.rootfs_extract
  - module: sparkfleet.bench.chroot_mounts
  - module: sparkfleet.bench.chroot_command
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.reports_changes
"""

EXAMPLES = r"""
- name: The host's own root as the native rootfs
  become: true
  sparkfleet.bench.rootfs_overlay:
    root: /var/lib/sparkfleet
    lower: /
  register: native_rootfs_overlay

- name: Unmount it (and whatever is bound inside)
  become: true
  sparkfleet.bench.rootfs_overlay:
    root: /var/lib/sparkfleet
    state: unmounted
"""

RETURN = r"""
path:
  description: The merged tree, the rootfs to chroot into.
  returned: always
  type: str
  sample: /var/lib/sparkfleet/rootfs/overlay-root
upper:
  description: The overlay's upper directory (what the chroot wrote).
  returned: always
  type: str
work:
  description: The overlay's work directory.
  returned: always
  type: str
mounted:
  description: Whether this run mounted the overlay (V(false) when it already was).
  returned: always
  type: bool
marker:
  description: The rootfs marker (in check mode, what it would hold).
  returned: always
  type: dict
  sample: {schema: 1, source: overlay, digest: "overlay:/", image: "overlay:/", lower: /,
           env: ["PATH=/usr/local/bin:/usr/bin:/bin"]}
env:
  description: The chroot's environment as C(K=V) strings (the marker's C(env)).
  returned: always
  type: list
  elements: str
hidden_mounts:
  description: File systems mounted below O(lower) that the overlay does not show (pseudo file systems and the
    work directory left out), as C(target fstype).
  returned: always
  type: list
  elements: str
  sample: ["/usr/local/nvidia ext4"]
unmounted:
  description: Paths unmounted (O(state=unmounted)).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs import rootfs_overlay


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            lower=dict(type="path", default="/"),
            name=dict(type="str"),
            env_keys=dict(type="list", elements="str", default=list(rootfs_overlay.DEFAULT_ENV_KEYS), no_log=False),
            env=dict(type="dict", default={}),
            reset=dict(type="bool", default=False),
            state=dict(type="str", default="mounted", choices=["mounted", "unmounted"]),
        ),
        supports_check_mode=True,
    )
    task.exit_with(module, rootfs_overlay.apply)


if __name__ == "__main__":
    main()
