"""Where a workload ran, as `[sparkfleet-probe]` lines: the proof of native vs container vs bare.

Standalone (stdlib only) and copied beside the workload scripts on every host, so a script running in a
chroot or a container imports it as a sibling module.
"""

from __future__ import annotations

import os
import socket


def probe_lines() -> list[str]:
    """Hostname, /.dockerenv, the device:inode of "/" (a chroot shows its rootfs), SPARKFLEET_ENV_PROBE, pid."""
    try:
        root = os.stat("/")
        root_id = f"{root.st_dev}:{root.st_ino}"
    except OSError as exc:
        root_id = f"error {exc.strerror}"
    env_probe = os.environ.get("SPARKFLEET_ENV_PROBE")
    return [
        f"[sparkfleet-probe] hostname: {socket.gethostname()}",
        f"[sparkfleet-probe] dockerenv: {'yes' if os.path.exists('/.dockerenv') else 'no'}",
        f"[sparkfleet-probe] root_dev_ino: {root_id}",
        f"[sparkfleet-probe] env_probe: {'(unset)' if env_probe is None else env_probe.replace(chr(10), ' ')}",
        f"[sparkfleet-probe] pid: {os.getpid()}",
    ]
