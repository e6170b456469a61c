# Copyright: sparkfleet contributors
# Apache-2.0
"""Native execution: the extracted container rootfs, its marker, its mounts, and the chroot launcher.

Shared by the ``rootfs_extract``, ``chroot_mounts`` and ``chroot_command`` modules and by the run executor.
Stdlib only, so that ``from .chroot import ...`` works in a module shipped to
a remote host.

The launcher (:func:`chroot_argv`) builds an argv, never a shell line::

    chroot ROOTFS /usr/bin/env -i [-C CWD] -- K=V ... ARGV0 ARGV1 ...

``env -i`` starts from an empty environment and sets exactly the image's own ``Config.Env`` (recorded in
the rootfs marker at extraction) plus what the caller adds, the way ``docker run`` would; GNU ``env``
looks ``ARGV0`` up on that new ``PATH``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MARKER = ".sparkfleet-rootfs.json"
PARTIAL_PREFIX = ".partial-"
MARKER_SCHEMA = 1

# What `docker run` adds to an image's environment when the image does not set it.
DOCKER_DEFAULT_ENV = {"HOME": "/root"}

# Sonames of the NVIDIA driver's user-space libraries, as `ldconfig -p` lists them (shell globs).
# libcuda/libnvidia-* are what the container toolkit injects for the compute and utility capabilities.
DEFAULT_DRIVER_LIB_PATTERNS = (
    "libcuda.so*",
    "libcudadebugger.so*",
    "libnvidia-*.so*",
    "libnvcuvid.so*",
    "libnvoptix.so*",
)
# From the container toolkit or the desktop stack, not the compute driver.
DEFAULT_DRIVER_LIB_EXCLUDES = ("libnvidia-container*.so*", "libnvidia-egl-*.so*")

# `uname -m` -> the tag ldconfig prints for that ABI, and -> the OCI/Docker architecture name.
LDCONFIG_ARCH_TAGS = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit", "s390x": "64bit"}
DOCKER_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
               "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "i686": "386", "i386": "386"}

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ChrootError(Exception):
    """A rootfs, marker or mount problem; the message names the path and the cause."""


# ------------------------------------------------------------------ image environment and launcher


def env_list_to_dict(env: Iterable[str] | Mapping[str, str] | None) -> dict[str, str]:
    """``["K=V", ...]`` (Docker's ``Config.Env``) -> ``{"K": "V"}``; a mapping is copied. Order is kept."""
    if env is None:
        return {}
    if isinstance(env, Mapping):
        return {str(k): str(v) for k, v in env.items()}
    out: dict[str, str] = {}
    for item in env:
        key, sep, value = str(item).partition("=")
        if not sep:
            continue  # Docker passes a bare "K" through from the host; a chroot has no host env to take it from
        out[key] = value
    return out


def read_marker(rootfs: str) -> dict[str, Any]:
    """The marker of a complete rootfs; :class:`ChrootError` when missing or unreadable."""
    path = os.path.join(rootfs, MARKER)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ChrootError(f"{rootfs} is not a complete sparkfleet rootfs: {MARKER} is missing") from None
    except (OSError, ValueError) as exc:
        raise ChrootError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not data.get("digest"):
        raise ChrootError(f"{path} is not a sparkfleet rootfs marker")
    return data


def load_image_env(rootfs: str) -> dict[str, str]:
    """The image's own environment (``Config.Env``), as recorded in the rootfs marker at extraction."""
    return env_list_to_dict(read_marker(rootfs).get("env") or [])


def launch_env(image_env: Mapping[str, str] | Iterable[str] | None,
               extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command in the chroot gets: Docker's defaults, the image's, then the caller's."""
    env = dict(DOCKER_DEFAULT_ENV)
    env.update(env_list_to_dict(image_env))
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    for key in env:
        if not _ENV_KEY.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
    return env


def chroot_argv(
    rootfs: str,
    image_env: Mapping[str, str] | Iterable[str] | None,
    argv: Sequence[str],
    extra_env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    chroot: str = "chroot",
    env_bin: str = "/usr/bin/env",
) -> list[str]:
    """argv that runs ``argv`` in ``rootfs`` with a clean environment (see the module docstring).

    ``argv`` is passed element by element, never through a shell. Its first element must not contain
    ``=`` (``env`` would take it for an assignment).
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of arguments, not a string")
    args = [str(a) for a in argv]
    if not args or not args[0]:
        raise ValueError("argv must name a program")
    if "=" in args[0]:
        raise ValueError(f"the program name {args[0]!r} contains '=': env would read it as an assignment")
    if not os.path.isabs(rootfs):
        raise ValueError(f"rootfs must be an absolute path, got {rootfs!r}")
    env = launch_env(image_env, extra_env)
    cmd = [chroot, rootfs, env_bin, "-i"]
    if cwd:
        cmd += ["-C", cwd]
    cmd.append("--")
    cmd += [f"{k}={v}" for k, v in env.items()]
    cmd += args
    return cmd


# ------------------------------------------------------------------ driver libraries (ldconfig -p)


@dataclass(frozen=True)
class LdEntry:
    soname: str
    flags: tuple[str, ...]
    path: str


_LD_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$")


def parse_ldconfig(text: str) -> list[LdEntry]:
    """Entries of ``ldconfig -p`` output, in order (the header line is skipped)."""
    out = []
    for line in text.splitlines():
        m = _LD_LINE.match(line)
        if m:
            out.append(LdEntry(m.group(1), tuple(f.strip() for f in m.group(2).split(",")), m.group(3)))
    return out


def driver_libraries(
    text: str,
    machine: str,
    patterns: Sequence[str] = DEFAULT_DRIVER_LIB_PATTERNS,
    excludes: Sequence[str] = DEFAULT_DRIVER_LIB_EXCLUDES,
) -> list[LdEntry]:
    """Driver libraries for this host's ABI (``machine`` as ``uname -m`` says) from ``ldconfig -p`` output.

    Entries for another ABI (i386 libraries on an x86_64 host) are left out; duplicates by path too.
    """
    tag = LDCONFIG_ARCH_TAGS.get(machine)
    seen: set[str] = set()
    out = []
    for entry in parse_ldconfig(text):
        if not any(fnmatch.fnmatchcase(entry.soname, p) for p in patterns):
            continue
        if any(fnmatch.fnmatchcase(entry.soname, p) for p in excludes):
            continue
        if tag is not None and tag not in entry.flags:
            continue
        if entry.path in seen:
            continue
        seen.add(entry.path)
        out.append(entry)
    return out


# ------------------------------------------------------------------ mounts


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class MountInfo:
    mount_id: int
    parent_id: int
    root: str
    target: str
    options: tuple[str, ...]
    fstype: str
    source: str

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def parse_mountinfo(text: str) -> list[MountInfo]:
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        out.append(MountInfo(int(fields[0]), int(fields[1]), _unescape(fields[3]), _unescape(fields[4]),
                             tuple(fields[5].split(",")), fields[sep + 1] if len(fields) > sep + 1 else "",
                             _unescape(fields[sep + 2]) if len(fields) > sep + 2 else ""))
    return out


def read_mountinfo(path: str = "/proc/self/mountinfo") -> list[MountInfo]:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return parse_mountinfo(fh.read())


def is_under(path: str, scope: str, include_self: bool = False) -> bool:
    scope = scope.rstrip("/") or "/"
    if path == scope:
        return include_self
    return path.startswith(scope + "/") if scope != "/" else True


def mounts_under(mounts: Sequence[MountInfo], scope: str, include_self: bool = False) -> list[MountInfo]:
    return [m for m in mounts if is_under(m.target, scope, include_self)]


def unmount_order(mounts: Sequence[MountInfo], scope: str) -> list[str]:
    """Mount points under ``scope`` to unmount: deepest first, later mounts first; one entry per mount."""
    if os.path.normpath(scope) == "/":
        raise ValueError("refusing to unmount everything under /")
    indexed = list(enumerate(mounts_under(mounts, scope)))
    indexed.sort(key=lambda im: (im[1].target.count("/"), im[0]), reverse=True)
    return [m.target for _, m in indexed]


def resolve_in_root(root: str, path: str, max_links: int = 40) -> str:
    """Resolve ``path`` as a process chrooted at ``root`` would, symlinks included, without ever leaving
    ``root``; returns the host path. Components that do not exist yet are kept as they are."""
    root = os.path.realpath(root)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate):
            links += 1
            if links > max_links:
                raise ChrootError(f"too many levels of symbolic links resolving {path} in {root}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def classify_pull_error(stderr: str) -> str:
    """A short cause for a failed ``docker pull``: unknown image, registry unreachable, auth, other."""
    text = stderr.lower()
    if any(s in text for s in ("manifest unknown", "not found", "does not exist", "name unknown",
                               "repository does not exist")):
        return "unknown image (the registry does not have it)"
    if any(s in text for s in ("unauthorized", "authentication required", "denied")):
        return "access denied by the registry (docker login?)"
    if any(s in text for s in ("connection refused", "no such host", "i/o timeout", "timeout", "network is unreachable",
                               "dial tcp", "temporary failure in name resolution", "tls handshake")):
        return "registry unreachable"
    if "cannot connect to the docker daemon" in text:
        return "Docker daemon not reachable"
    return "docker pull failed"


def docker_arch(machine: str) -> str:
    return DOCKER_ARCH.get(machine, machine)
