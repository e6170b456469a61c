# Copyright: sparkfleet contributors
# Apache-2.0
"""Native execution: the extracted container rootfs, its marker, its mounts, and the chroot launcher.

Shared by the ``rootfs_extract``, ``chroot_mounts`` and ``chroot_command`` modules and by the run executor.
Stdlib only, so that ``from .chroot import ...`` works in a module shipped to
a remote host.

The launcher (:func:`chroot_argv`) builds an argv, never a shell line::

    chroot [--userspec=USER] ROOTFS /usr/bin/env -i [-C CWD] -- K=V ... [ENTRYPOINT ...] ARGV0 ARGV1 ...

It runs what ``docker run IMAGE ARGV...`` runs, minus the namespaces and cgroups: the image's
``Config.Entrypoint`` followed by ``ARGV`` (which replaces ``Config.Cmd``; with no ARGV, ``Cmd`` is used),
in ``Config.WorkingDir`` unless the caller names a directory (``docker run --workdir``), as ``Config.User``.
``env -i`` starts from an empty environment and sets exactly what Docker would: ``HOME``/``PATH`` defaults,
the image's own ``Config.Env``, then what the caller adds (``--env``). GNU ``env`` looks the first word up on
that new ``PATH``. Because the image's entrypoint runs (NGC images: ``/opt/nvidia/nvidia_entrypoint.sh``, a
bash script), bash sources ``BASH_ENV``/``ENV`` from that environment exactly as in the container.

The entrypoint, Cmd, WorkingDir and User are recorded in the rootfs marker at extraction (schema 2). A
marker of schema 1 lacks them: :func:`load_image_config` says so (``recorded: False``) and the caller runs
the program directly, warning that the rootfs must be provisioned again.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..contract.textfile import read_json_object, write_atomic

MARKER = ".sparkfleet-rootfs.json"
PARTIAL_PREFIX = ".partial-"
#: Marker format: 1 = digest, image, env; 2 = also entrypoint, cmd, working_dir, user (the image config the
#: launcher needs to run what `docker run` runs). A schema-1 marker is still read (see load_image_config).
MARKER_SCHEMA = 2
#: The image config keys a schema-2 marker holds, as `docker image inspect` names them under Config.
IMAGE_CONFIG_KEYS = {"entrypoint": "Entrypoint", "cmd": "Cmd", "working_dir": "WorkingDir", "user": "User"}

# What `docker run` adds to an image's environment when the image does not set it (HOME for root; PATH is
# the daemon's default, moby oci/defaults.go DefaultPathEnv for Linux).
DOCKER_DEFAULT_ENV = {"HOME": "/root", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
_ROOT_USERS = ("", "root", "0", "root:root", "0:0")

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


def write_marker(rootfs: str, marker: Mapping[str, Any]) -> None:
    """Replace the marker of a complete rootfs atomically (temporary file, fsync, rename)."""
    write_atomic(os.path.join(rootfs, MARKER), json.dumps(marker, indent=2, sort_keys=True) + "\n")


def load_image_env(rootfs: str) -> dict[str, str]:
    """The image's own environment (``Config.Env``), as recorded in the rootfs marker at extraction."""
    return env_list_to_dict(read_marker(rootfs).get("env") or [])


def image_config_from_inspect(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The launcher's part of ``docker image inspect``'s ``Config``: entrypoint, cmd (lists), working_dir,
    user (strings). ``null`` in Docker's JSON (no entrypoint) becomes ``[]``."""
    config = config or {}

    def words(value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):  # an old engine may give a string; Docker runs it through /bin/sh -c
            return ["/bin/sh", "-c", value]
        return [str(v) for v in value]

    return {"entrypoint": words(config.get("Entrypoint")), "cmd": words(config.get("Cmd")),
            "working_dir": str(config.get("WorkingDir") or ""), "user": str(config.get("User") or "")}


def image_config(marker: Mapping[str, Any]) -> dict[str, Any]:
    """The image config a marker records: entrypoint, cmd, working_dir, user and ``recorded`` (False for a
    schema-1 marker or an overlay rootfs's marker without them: no entrypoint is then known)."""
    recorded = "entrypoint" in marker
    return {"entrypoint": [str(a) for a in (marker.get("entrypoint") or [])],
            "cmd": [str(a) for a in (marker.get("cmd") or [])],
            "working_dir": str(marker.get("working_dir") or ""), "user": str(marker.get("user") or ""),
            "recorded": recorded, "schema": marker.get("schema", 1), "source": marker.get("source", "image")}


def load_image_config(rootfs: str) -> dict[str, Any]:
    """:func:`image_config` of the rootfs's marker."""
    return image_config(read_marker(rootfs))


def stale_marker_warning(rootfs: str, config: Mapping[str, Any]) -> str | None:
    """A one-line warning when the marker predates the image config (schema 1), else None."""
    if config.get("recorded") or config.get("source") == "overlay":
        return None
    return (f"rootfs {rootfs} has a schema-{config.get('schema', 1)} marker without the image's entrypoint: "
            f"the program runs directly, not through the entrypoint as docker run does (BASH_ENV/ENV not "
            f"sourced); run playbooks/provision.yml again to record it")


def docker_run_argv(entrypoint: Sequence[str] | None, cmd: Sequence[str] | None,
                    argv: Sequence[str] | None) -> list[str]:
    """What ``docker run IMAGE ARGV...`` executes: Entrypoint + (ARGV if given, else the image's Cmd)."""
    args = [str(a) for a in argv] if argv else [str(a) for a in (cmd or [])]
    return [str(a) for a in (entrypoint or [])] + args


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
    config: Mapping[str, Any] | None = None,
) -> list[str]:
    """argv that runs ``argv`` in ``rootfs`` as ``docker run`` would (see the module docstring).

    ``config`` is the image config (:func:`image_config`: entrypoint, cmd, working_dir, user); without it
    ``argv`` runs directly (schema-1 behaviour). ``cwd`` overrides the image's WorkingDir like
    ``docker run --workdir``. ``argv`` is passed element by element, never through a shell. The first word
    run must not contain ``=`` (``env`` would take it for an assignment).
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of arguments, not a string")
    config = config or {}
    args = docker_run_argv(config.get("entrypoint"), config.get("cmd"), argv)
    if not args or not args[0]:
        raise ValueError("argv must name a program (and the image has no entrypoint or Cmd to run)")
    if "=" in args[0]:
        raise ValueError(f"the program name {args[0]!r} contains '=': env would read it as an assignment")
    if not os.path.isabs(rootfs):
        raise ValueError(f"rootfs must be an absolute path, got {rootfs!r}")
    env = launch_env(image_env, extra_env)
    user = str(config.get("user") or "")
    if "\n" in user or "\0" in user:
        raise ValueError(f"invalid image user {user!r}")
    cmd = [chroot]
    if user not in _ROOT_USERS:
        cmd.append(f"--userspec={user}")
    cmd += [rootfs, env_bin, "-i"]
    workdir = cwd or str(config.get("working_dir") or "")
    if workdir:
        cmd += ["-C", workdir]
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


# ------------------------------------------------------------------ ld cache and CUDA forward compatibility
#
# What the NVIDIA container toolkit does for `docker run --gpus` after it has injected the driver, done the
# same way for the chroot (nvidia-container-toolkit @90988f7a):
# * cmd/nvidia-cdi-hook/cudacompat/cudacompat.go (enable-cuda-compat): when the container has
#   /usr/local/cuda/compat and an /etc/ld.so.cache, and exactly one /usr/local/cuda/compat/libcuda.so.*.*
#   whose MAJOR version is greater than the host driver's, it writes that directory into
#   /etc/ld.so.conf.d/00-compat-*.conf (the 00- prefix puts it before every other entry);
# * cmd/nvidia-cdi-hook/update-ldcache/update-ldcache.go (update-ldcache): runs ldconfig for the container's
#   root with -f /etc/ld.so.conf and -C /etc/ld.so.cache (-N when the container has no cache).

CUDA_COMPAT_PATH = "/usr/local/cuda/compat"
#: The ld.so.conf.d entry sparkfleet writes (the toolkit's pattern 00-compat-*.conf, with a fixed name so
#: that undo finds it).
CUDA_COMPAT_CONF = "/etc/ld.so.conf.d/00-compat-sparkfleet.conf"
LD_CACHE = "/etc/ld.so.cache"
#: A copy of the image's own ld cache, taken before the first refresh; undo puts it back.
LD_CACHE_BACKUP = "/etc/ld.so.cache.sparkfleet-orig"
#: What chroot_mounts changed inside the rootfs (ld cache, compat entry), for the run record and for undo.
NATIVE_STATE = ".sparkfleet-native-state.json"

_LIBCUDA_VERSION = re.compile(r"^libcuda\.so\.(\d+(?:\.\d+)+)$")
_DRIVER_VERSION = re.compile(r"(?<![\d.])(\d{2,4}\.\d+(?:\.\d+)?)(?![\d.])")


def major_version(version: str) -> int:
    """The toolkit's extractMajorVersion: the integer before the first dot; ValueError when there is none."""
    return int(str(version).split(".", 1)[0])


def host_driver_version(driver_libraries: Iterable[str] = (),
                        version_files: Sequence[str] = ("/sys/module/nvidia/version",
                                                        "/proc/driver/nvidia/version")) -> str | None:
    """The host driver version (``580.95.05``): from the file name the bound libcuda resolves to, else from
    the kernel module. None when neither says."""
    for path in driver_libraries:
        m = _LIBCUDA_VERSION.match(os.path.basename(os.path.realpath(path)))
        if m:
            return m.group(1)
    for path in version_files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        m = _DRIVER_VERSION.search(text)
        if m:
            return m.group(1)
    return None


def cuda_compat_decision(rootfs: str, host_version: str | None) -> dict[str, Any]:
    """Whether the image's CUDA forward-compat libcuda goes first, decided as the toolkit's
    enable-cuda-compat hook decides it. Returns ``enabled``, ``reason``, ``host_driver_version``,
    ``compat_version``, ``compat_library`` and ``compat_dir`` (paths inside the rootfs)."""
    out: dict[str, Any] = {"enabled": False, "host_driver_version": host_version, "compat_version": None,
                           "compat_library": None, "compat_dir": None, "reason": ""}
    compat = resolve_in_root(rootfs, CUDA_COMPAT_PATH)
    if not host_version:
        out["reason"] = "host driver version unknown"
        return out
    if not os.path.isdir(compat):
        out["reason"] = f"no {CUDA_COMPAT_PATH} in the image"
        return out
    libs = sorted(n for n in os.listdir(compat)
                  if fnmatch.fnmatchcase(n, "libcuda.so.*.*") and os.path.isfile(os.path.join(compat, n)))
    if libs:
        out["compat_version"] = libs[0][len("libcuda.so."):]
        out["compat_library"] = f"{CUDA_COMPAT_PATH}/{libs[0]}"
    if not os.path.lexists(resolve_in_root(rootfs, LD_CACHE)):
        out["reason"] = f"the image has no {LD_CACHE}"
        return out
    if not libs:
        out["reason"] = f"no libcuda.so.*.* in {CUDA_COMPAT_PATH}"
        return out
    if len(libs) != 1:
        out["reason"] = f"{len(libs)} compat libcuda libraries in {CUDA_COMPAT_PATH}: {', '.join(libs)}"
        return out
    try:
        compat_major, host_major = major_version(out["compat_version"]), major_version(host_version)
    except ValueError:
        out["reason"] = f"cannot read a major version from {out['compat_version']!r} or {host_version!r}"
        return out
    if host_major >= compat_major:
        out["reason"] = (f"host driver {host_version} is not older than the compat libcuda "
                         f"{out['compat_version']} (major {host_major} >= {compat_major})")
        return out
    real = os.path.realpath(os.path.join(compat, libs[0]))
    root = os.path.realpath(rootfs)
    inside = "/" + os.path.relpath(os.path.dirname(real), root) if is_under(real, root) else CUDA_COMPAT_PATH
    out.update(enabled=True, compat_dir=inside,
               reason=f"compat libcuda {out['compat_version']} is newer than the host driver {host_version} "
                      f"(major {compat_major} > {host_major})")
    return out


def ldconfig_in_root(rootfs: str) -> str | None:
    """The image's own ldconfig binary (path inside the rootfs): Ubuntu's /sbin/ldconfig is a shell wrapper
    around ldconfig.real, which the toolkit runs directly (NormalizeLDConfigPath)."""
    for path in ("/sbin/ldconfig.real", "/usr/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        host = resolve_in_root(rootfs, path)
        if os.path.isfile(host) and os.access(host, os.X_OK):
            return path
    return None


def ldconfig_argv(rootfs: str, ldconfig: str, has_cache: bool, chroot: str = "chroot") -> list[str]:
    """``chroot ROOTFS LDCONFIG -f /etc/ld.so.conf (-C /etc/ld.so.cache | -N)``: the update-ldcache hook's
    arguments, with the image's own ldconfig run inside the rootfs."""
    return [chroot, rootfs, ldconfig, "-f", "/etc/ld.so.conf"] + (["-C", LD_CACHE] if has_cache else ["-N"])


def read_native_state(rootfs: str) -> dict[str, Any] | None:
    """What chroot_mounts recorded in the rootfs (ld cache refresh, compat decision), or None."""
    return read_json_object(os.path.join(rootfs, NATIVE_STATE))
