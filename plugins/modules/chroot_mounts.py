#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: the bind mounts that make an extracted container rootfs usable through chroot, with the GPU;
the work is sparkfleet_host.rootfs.mounts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chroot_mounts
short_description: Bind-mounts what a chroot into a container rootfs needs, GPU driver included
description:
  - With O(state=mounted), bind-mounts into O(rootfs), in this order - C(/proc), C(/sys) (read-only),
    C(/dev), C(/dev/pts), C(/dev/shm); the NVIDIA device nodes (reached through the C(/dev) bind, or bound one
    by one when O(system=false)); the host driver's user-space libraries that C(ldconfig -p) lists under
    O(driver_library_patterns) for the host's ABI, each at the path the host has it (read-only); the driver
    tools in O(driver_binaries) (symlinks resolved) at C(/usr/bin/NAME) (read-only); C(/etc/resolv.conf)
    (read-only); then O(binds) (models, results, ...).
  - Mounts only what is not mounted yet, and remounts read-only a bind that should be. Mount points are
    resolved inside the rootfs as the chroot will see them (an image's C(/lib -> usr/lib) is followed, an
    absolute symlink never leads out of the rootfs); missing ones are created, never inside another mount.
  - With O(state=unmounted), unmounts everything mounted under O(scope) (default O(rootfs)) as
    C(/proc/self/mountinfo) lists it - deepest and latest first - so mounts left by a crash are found too.
    A busy mount is detached lazily (C(umount -l)) with a warning. Before that, every rootfs under O(scope)
    (O(scope) itself and its direct subdirectories) with a C(.sparkfleet-native-state.json) gets the image's own
    ld cache back and loses the compat entry (RV(restored)). Symlinks ldconfig created in library directories
    (as in a container's writable layer) stay.
  - Then, as the NVIDIA container toolkit does for C(docker run --gpus) (its C(enable-cuda-compat) and
    C(update-ldcache) hooks), makes the CUDA forward-compat choice - when the image has exactly one
    C(/usr/local/cuda/compat/libcuda.so.*.*) whose major version is above the host driver's, its directory
    goes into C(/etc/ld.so.conf.d/00-compat-sparkfleet.conf) - and refreshes the rootfs's ld cache by running
    the image's own C(ldconfig) in the chroot (O(ldconfig), O(cuda_compat)). The image's original
    C(/etc/ld.so.cache) is kept as C(/etc/ld.so.cache.sparkfleet-orig); what was done is returned
    (RV(ldcache), RV(cuda_compat)) and written to C(.sparkfleet-native-state.json) in the rootfs.
  - Mounts are not recorded - their state is what the kernel reports.
  - Finding no NVIDIA device node, driver library or tool is not an error - it is returned in RV(missing)
    (a host without a GPU); the verify probe decides whether that matters.
version_added: "0.1.0"
options:
  rootfs:
    description:
      - The extracted rootfs (the path M(sparkfleet.bench.rootfs_extract) returns). Required with O(state=mounted).
    type: path
  state:
    description:
      - V(mounted) or V(unmounted).
    type: str
    choices: [mounted, unmounted]
    default: mounted
  scope:
    description:
      - With O(state=unmounted), everything mounted under this directory is unmounted (for example the
        C(rootfs/) directory holding every extracted image). Defaults to O(rootfs). Never C(/).
    type: path
  system:
    description:
      - Bind C(/proc), C(/sys), C(/dev), C(/dev/pts), C(/dev/shm).
    type: bool
    default: true
  device_globs:
    description:
      - Shell globs of the NVIDIA device nodes on the host.
    type: list
    elements: str
    default: [/dev/nvidia*, /dev/nvidia-caps/*]
  driver_library_patterns:
    description:
      - Shell globs matched against the sonames C(ldconfig -p) prints; matching libraries for the host's ABI
        are bound. Defaults cover libcuda, libcudadebugger, libnvidia-*, libnvcuvid, libnvoptix.
    type: list
    elements: str
  driver_library_excludes:
    description:
      - Sonames left out even though they match (container toolkit and desktop libraries by default).
    type: list
    elements: str
  driver_binaries:
    description:
      - Driver tools found on the host's C(PATH) and bound at C(/usr/bin/NAME) in the rootfs.
    type: list
    elements: str
    default: [nvidia-smi]
  resolv_conf:
    description:
      - Bind the host's C(/etc/resolv.conf) (its target, when a symlink) read-only.
    type: bool
    default: true
  ldconfig:
    description:
      - After binding, run the image's C(ldconfig) in the chroot to refresh its ld cache (the toolkit's
        C(update-ldcache) hook).
    type: bool
    default: true
  cuda_compat:
    description:
      - Make the CUDA forward-compat choice the toolkit's C(enable-cuda-compat) hook makes (V(false) never puts
        the image's compat libcuda first).
    type: bool
    default: true
  host_driver_version:
    description:
      - The host driver version to compare the compat libcuda with; by default read from the file name of the
        host's libcuda, else from the kernel module.
    type: str
  binds:
    description:
      - Further host directories or files to bind (models, results, ...).
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description: Host path; it must exist.
        type: path
        required: true
      dest:
        description: Path inside the rootfs; defaults to O(binds[].src).
        type: str
      read_only:
        description: Bind read-only.
        type: bool
        default: true
notes:
  - Needs root. Mounts live in the mount namespace the module runs in.
  - Check mode reports RV(mounted) and RV(unmounted) as they would be, changing nothing.
seealso:
  - module: sparkfleet.bench.rootfs_extract
  - module: sparkfleet.bench.chroot_command
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.reports_changes
"""

EXAMPLES = r"""
- name: Bind what the chroot needs
  become: true
  sparkfleet.bench.chroot_mounts:
    rootfs: "{{ native_rootfs_path }}"
    binds:
      - {src: /srv/models, read_only: true}
      - {src: /var/lib/sparkfleet/results, read_only: false}

- name: Unmount everything under the rootfs directory (restore)
  become: true
  sparkfleet.bench.chroot_mounts:
    state: unmounted
    scope: /var/lib/sparkfleet/rootfs
"""

RETURN = r"""
mounts:
  description: The mounts wanted (O(state=mounted)), each with C(src), C(dest) (inside the rootfs), C(target)
    (host path), C(read_only), C(kind) (system, device, driver, binary, resolv, bind).
  returned: always
  type: list
  elements: dict
mounted:
  description: Host paths mounted (or remounted read-only) by this run.
  returned: always
  type: list
  elements: str
unmounted:
  description: Host paths unmounted by this run.
  returned: always
  type: list
  elements: str
driver_libraries:
  description: Driver libraries found through C(ldconfig -p), host paths.
  returned: always
  type: list
  elements: str
  sample: [/lib/aarch64-linux-gnu/libcuda.so.1, /lib/aarch64-linux-gnu/libnvidia-ml.so.1]
devices:
  description: NVIDIA device nodes found on the host.
  returned: always
  type: list
  elements: str
  sample: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm]
ldcache:
  description: The ld cache refresh - C(refreshed), C(ldconfig) (path in the rootfs), C(argv), C(changed)
    (whether the cache differs from before), C(backup) (the image's original cache, or null when it had none).
  returned: when O(state=mounted)
  type: dict
cuda_compat:
  description: The CUDA forward-compat decision - C(enabled), C(reason), C(host_driver_version),
    C(compat_version), C(compat_library), C(compat_dir), C(conf) (the ld.so.conf.d entry written, or null).
  returned: when O(state=mounted)
  type: dict
  sample: {enabled: false, reason: "host driver 580.95.05 is not older than the compat libcuda 575.57.08 (major 580 >= 575)",
           host_driver_version: 580.95.05, compat_version: 575.57.08, compat_library: /usr/local/cuda/compat/libcuda.so.575.57.08,
           compat_dir: null, conf: null}
restored:
  description: With O(state=unmounted), the rootfs directories whose ld cache and compat entry were put back.
  returned: always
  type: list
  elements: str
missing:
  description: What was looked for and not found (no device nodes, no driver libraries, a tool not on PATH).
  returned: always
  type: list
  elements: str
  sample: ["no NVIDIA device nodes (/dev/nvidia*, /dev/nvidia-caps/*)"]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs import mounts


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            rootfs=dict(type="path"),
            state=dict(type="str", default="mounted", choices=["mounted", "unmounted"]),
            scope=dict(type="path"),
            system=dict(type="bool", default=True),
            device_globs=dict(type="list", elements="str", default=["/dev/nvidia*", "/dev/nvidia-caps/*"]),
            driver_library_patterns=dict(type="list", elements="str"),
            driver_library_excludes=dict(type="list", elements="str"),
            driver_binaries=dict(type="list", elements="str", default=["nvidia-smi"]),
            resolv_conf=dict(type="bool", default=True),
            ldconfig=dict(type="bool", default=True),
            cuda_compat=dict(type="bool", default=True),
            host_driver_version=dict(type="str"),
            binds=dict(type="list", elements="dict", default=[], options=dict(
                src=dict(type="path", required=True),
                dest=dict(type="str"),
                read_only=dict(type="bool", default=True),
            )),
        ),
        required_if=[("state", "mounted", ("rootfs",))],
        required_one_of=[("rootfs", "scope")],
        supports_check_mode=True,
    )
    task.exit_with(module, mounts.apply)


if __name__ == "__main__":
    main()
