# -*- coding: utf-8 -*-
"""The environment fingerprint of a running benchmark: what it really loaded, read from /proc.

Native and container runs are meant to differ only in isolation (namespaces, cgroups). Whether they do is
read from the benchmark process itself, on the host, while it runs:

* its process: the descendants of a root pid (natively the launched process group leader; in a container
  the container's init, ``docker inspect .State.Pid``), walked through ``/proc/*/stat``; the benchmark is the
  one that maps the most NVIDIA/CUDA libraries, then a Python, then the largest RSS;
* ``/proc/PID/maps``: the NVIDIA, CUDA and framework libraries actually mapped (libcuda, libnvidia-ml,
  libcudart, libnccl, libnvinfer, libtorch, ...), their versions from the file names, and where they come
  from: ``compat`` (``/usr/local/cuda/compat``), ``host`` (a file bind-mounted in, as the driver libraries are
  by chroot_mounts natively and by the NVIDIA container toolkit in Docker - the version is then read from the
  bind's source name in ``/proc/PID/mountinfo``, since a bind over a soname path hides it) or ``image``;
* ``/proc/PID/environ``: ``LD_LIBRARY_PATH`` and a few other loader/Python variables, and the names (never
  the values) of all variables;
* ``/proc/PID/root/...``: the Python version (the executable's name) and the torch, tensorrt_llm and
  tensorrt versions, from their ``*.dist-info`` directories or ``version.py`` under the process's own root.

Paths are the process's own view (a native process's chroot prefix is removed), so native and container
fingerprints compare directly (:func:`differences`). Stdlib only, Python 3.8 syntax: it ships to hosts in
the ``bench_run`` module and is imported by the report.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

from ..rootfs.chroot import parse_mountinfo
from . import procstat

#: Library name prefixes (before ``.so``) that a fingerprint lists.
LIBRARY_PREFIXES = ("libcuda", "libnvidia-", "libcudart", "libcublas", "libcudnn", "libnccl", "libnvinfer",
                    "libnvonnxparser", "libnvrtc", "libnvJitLink", "libcusparse", "libcufft", "libcurand",
                    "libcusolver", "libnvshmem", "libtorch", "libc10", "libtensorrt_llm", "libth_common",
                    "libpython", "libnvToolsExt", "libcupti")
#: Environment variables whose values a fingerprint keeps (loader and Python search paths, CUDA switches).
ENV_KEYS = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHONPATH", "PYTHONHOME", "CUDA_HOME", "CUDA_PATH",
            "CUDA_MODULE_LOADING", "CUDA_VERSION", "TRITON_LIBCUDA_PATH", "BASH_ENV", "ENV", "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_DRIVER_CAPABILITIES")
#: Packages whose versions a fingerprint reads (distribution name, import name).
PACKAGES = (("torch", "torch"), ("tensorrt_llm", "tensorrt_llm"), ("tensorrt", "tensorrt"))
#: Variables that differ between environments by design (isolation, the run's own identity), not compared.
ISOLATION_ENV = frozenset(("HOSTNAME", "SPARKFLEET_ENV_PROBE", "HOME", "PWD", "OLDPWD", "SHLVL", "_"))

_LIB = re.compile(r"^(lib[A-Za-z0-9_+\-]*?)(?:\.so)((?:\.\d+)*)$")
_PY = re.compile(r"python(\d+\.\d+)")
_VERSION_LINE = re.compile(r"""^\s*(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)


# ------------------------------------------------------------------------------------ process tree


def _read(path, mode="r"):
    try:
        with open(path, mode) as fh:
            return fh.read()
    except (OSError, ValueError):
        return None


def process_table(proc="/proc"):
    """pid -> (comm, ppid, rss_pages) of every process."""
    out = {}
    for pid in procstat.pids(proc):
        stat = procstat.read(pid, proc)
        if stat is not None:
            out[pid] = (stat.comm, stat.ppid, stat.rss_pages)
    return out


def descendants(root_pid, table):
    """``root_pid`` and every process below it, breadth first, with its depth: [(pid, depth), ...]."""
    children = {}
    for pid, (_comm, ppid, _rss) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, queue, seen = [], [(int(root_pid), 0)], set()
    while queue:
        pid, depth = queue.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        if pid in table:
            out.append((pid, depth))
        queue.extend((child, depth + 1) for child in sorted(children.get(pid, ())))
    return out


# ---------------------------------------------------------------------------------------- maps


def parse_maps(text):
    """Mapped file paths of a /proc/PID/maps text, in first-seen order, each once: [(path, inode), ...]."""
    out, seen = [], set()
    for line in (text or "").splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5]
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        if path not in seen:
            seen.add(path)
            out.append((path, fields[4]))
    return out


def split_library(filename):
    """``libcuda.so.580.95.05`` -> (``libcuda``, ``580.95.05``); ``libtorch_cuda.so`` -> (``libtorch_cuda``, None);
    not a shared library -> None."""
    m = _LIB.match(filename)
    if not m:
        return None
    version = m.group(2).lstrip(".") or None
    return m.group(1), version


def is_listed(name):
    return name.startswith(LIBRARY_PREFIXES)


def strip_root(path, root):
    """``path`` as the process sees it: without its root's prefix (a chroot, seen from the host)."""
    root = (root or "/").rstrip("/")
    if root and path.startswith(root + "/"):
        return path[len(root):]
    return path


def library_entries(mapped, root="/", mount_roots=None):
    """Listed libraries among mapped paths: [{name, version, path, source}], source compat | host | image.

    ``mount_roots``: in-root mount point -> the mount's root in its source file system (/proc/PID/mountinfo),
    so that a driver library bound over its soname path (``libcuda.so.1``) gets the version of the file
    that was bound (``libcuda.so.580.95.05``) and counts as ``host``."""
    mount_roots = mount_roots or {}
    out = []
    for path, _inode in mapped:
        inside = strip_root(path, root)
        parts = split_library(os.path.basename(inside))
        if parts is None or not is_listed(parts[0]):
            continue
        name, version = parts
        source = "image"
        bound = mount_roots.get(inside)
        if bound is not None:
            source = "host"
            bound_parts = split_library(os.path.basename(bound))
            if bound_parts and bound_parts[0] == name and bound_parts[1] and (
                    not version or len(bound_parts[1].split(".")) > len(version.split("."))):
                version = bound_parts[1]
        if "/compat/" in inside:
            source = "compat"
        out.append({"name": name, "version": version, "path": inside, "source": source})
    return out


def parse_mount_roots(text):
    """In-root mount point -> the mount's root in its file system, from /proc/PID/mountinfo, for mounts of
    shared libraries (bind mounts of directories are not needed)."""
    return {m.target: m.root for m in parse_mountinfo(text or "") if ".so" in os.path.basename(m.target)}


# ----------------------------------------------------------------------------------- environment


def parse_environ(data):
    """/proc/PID/environ bytes -> {name: value}."""
    out = {}
    for item in (data or b"").split(b"\0"):
        if not item:
            continue
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep:
            out[key] = value
    return out


# -------------------------------------------------------------------------------------- versions


def python_version(exe, mapped):
    """``3.12`` from the executable's name (``python3.12``) or a mapped libpython3.12."""
    for text in [os.path.basename(exe or "")] + [os.path.basename(p) for p, _ in mapped]:
        m = _PY.search(text)
        if m:
            return m.group(1)
    return None


def site_dirs(mapped, root_view, py):
    """Candidate site-packages directories (paths inside the process's root): those of mapped files first,
    then the usual ones for Python ``py``."""
    out = []
    for path, _ in mapped:
        inside = strip_root(path, root_view)
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in inside:
                site = inside.split(marker, 1)[0] + marker.rstrip("/")
                if site not in out:
                    out.append(site)
    if py:
        for site in ("/usr/local/lib/python%s/dist-packages" % py, "/usr/lib/python3/dist-packages",
                     "/usr/local/lib/python%s/site-packages" % py, "/usr/lib/python%s/site-packages" % py):
            if site not in out:
                out.append(site)
    return out


def package_version(root, sites, dist, module):
    """Version of a package installed under one of ``sites`` (inside ``root``, the /proc/PID/root link):
    its ``<dist>-<version>.dist-info`` name, else ``<module>/version.py``."""
    for site in sites:
        host = root.rstrip("/") + site
        try:
            names = os.listdir(host)
        except OSError:
            continue
        for name in sorted(names):
            if name.endswith(".dist-info") and name.lower().startswith(dist.lower() + "-"):
                rest = name[len(dist) + 1: -len(".dist-info")]
                if rest and rest[0].isdigit():
                    return rest
        text = _read(os.path.join(host, module, "version.py"))
        if text:
            m = _VERSION_LINE.search(text)
            if m:
                return m.group(1)
    return None


# ----------------------------------------------------------------------------------- one sample


def _process_facts(pid, proc):
    base = os.path.join(proc, str(pid))
    mapped = parse_maps(_read(os.path.join(base, "maps")))
    try:
        root_view = os.readlink(os.path.join(base, "root"))
    except OSError:
        root_view = "/"
    try:
        exe = os.readlink(os.path.join(base, "exe"))
    except OSError:
        exe = ""
    return mapped, root_view, strip_root(exe, root_view)


def pick_process(root_pid, proc="/proc"):
    """(pid, depth) of the benchmark process under ``root_pid``: most listed libraries mapped, then a
    Python, then deepest, then the largest RSS; None when the tree is gone."""
    table = process_table(proc)
    best, best_key = None, None
    for pid, depth in descendants(root_pid, table):
        comm, _ppid, rss = table[pid]
        mapped = parse_maps(_read(os.path.join(proc, str(pid), "maps")))
        listed = sum(1 for path, _ in mapped
                     if (split_library(os.path.basename(path)) or ("",))[0].startswith(LIBRARY_PREFIXES))
        key = (listed, comm.startswith("python") or comm.startswith("pt_main"), depth, rss)
        if best_key is None or key > best_key:
            best, best_key = (pid, depth), key
    return best


def sample(root_pid, proc="/proc"):
    """One fingerprint of the benchmark process under ``root_pid``, or None when there is none."""
    chosen = pick_process(root_pid, proc)
    if chosen is None:
        return None
    pid, depth = chosen
    base = os.path.join(proc, str(pid))
    mapped, root_view, exe = _process_facts(pid, proc)
    mount_roots = parse_mount_roots(_read(os.path.join(base, "mountinfo")))
    environ = parse_environ(_read(os.path.join(base, "environ"), "rb"))
    comm = getattr(procstat.read(pid, proc), "comm", "")
    py = python_version(exe, mapped)
    root_link = os.path.join(base, "root")
    sites = site_dirs(mapped, root_view, py)
    packages = {dist: package_version(root_link, sites, dist, module) for dist, module in PACKAGES}
    return {
        "pid": pid,
        "depth": depth,
        "comm": comm,
        "exe": exe,
        "chroot": root_view != "/",
        "libraries": library_entries(mapped, root_view, mount_roots),
        "env": {k: environ[k] for k in ENV_KEYS if k in environ},
        "env_names": sorted(environ),
        "python": py,
        "packages": packages,
    }


def richness(fp):
    """How much a sample says: libraries with versions, then libraries, then package versions."""
    if not fp:
        return (-1, -1, -1)
    libs = fp.get("libraries") or []
    return (len(libs), sum(1 for lib in libs if lib.get("version")),
            sum(1 for v in (fp.get("packages") or {}).values() if v) + (1 if fp.get("python") else 0))


def richest(samples):
    best = None
    for fp in samples:
        if fp and (best is None or richness(fp) > richness(best)):
            best = fp
    return best


# -------------------------------------------------------------------------------------- sampling


def container_pid(docker, name, timeout=10.0, stop=None):
    """The container's init pid (``docker inspect .State.Pid``), waiting up to ``timeout`` for it to start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        try:
            proc = subprocess.run([docker, "inspect", "--format", "{{.State.Pid}}", name],
                                  capture_output=True, text=True, errors="replace", timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        pid = proc.stdout.strip()
        if proc.returncode == 0 and pid.isdigit() and pid != "0":
            return int(pid)
        time.sleep(0.1)
    return None


#: Seconds after the start at which samples are taken; then every LATE_INTERVAL_S.
SCHEDULE_S = (0.1, 0.3, 0.6, 1.0, 1.5, 2.0, 3.0, 4.5, 6.0, 9.0, 12.0, 20.0, 30.0, 45.0, 60.0)
LATE_INTERVAL_S = 60.0
MAX_SAMPLES = 60


class Sampler:
    """Samples the fingerprint of one launched command in a thread (:meth:`start` with the launched pid, or
    the container's name), keeping the richest sample; :meth:`stop` returns it (or None)."""

    def __init__(self, proc="/proc"):
        self.proc = proc
        self._stop = threading.Event()
        self._thread = None
        self._samples = 0
        self._best = None
        self._error = None

    def start(self, pid, container=None, docker=None):
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(pid, container, docker), daemon=True)
        self._thread.start()

    def _run(self, pid, container, docker):
        try:
            root = pid
            if container:
                root = container_pid(docker or "docker", container, timeout=30.0, stop=self._stop)
                if root is None:
                    self._error = "container %s: no init pid" % container
                    return
            started = time.monotonic()
            for i in range(MAX_SAMPLES):
                due = SCHEDULE_S[i] if i < len(SCHEDULE_S) else SCHEDULE_S[-1] + LATE_INTERVAL_S * (
                    i - len(SCHEDULE_S) + 1)
                if self._stop.wait(max(0.0, started + due - time.monotonic())):
                    return
                fp = sample(root, self.proc)
                if fp is None:
                    if not os.path.exists(os.path.join(self.proc, str(root))):
                        return
                    continue
                self._samples += 1
                if self._best is None or richness(fp) > richness(self._best):
                    self._best = fp
        except Exception as exc:  # never let the fingerprint break a run
            self._error = "%s: %s" % (type(exc).__name__, exc)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._best is None:
            return None
        out = dict(self._best)
        out["samples"] = self._samples
        return out

    @property
    def error(self):
        return self._error


def section(fp, kind, launch=None, native_state=None, warnings=None, error=None):
    """The run record's ``fingerprint`` section: the richest sample plus how the run was launched."""
    out = dict(fp or {})
    out["environment_kind"] = kind
    if kind == "bare" and out.get("libraries"):  # a bare run has no image: every file it maps is the host's
        out["libraries"] = [dict(lib, source="host") if lib.get("source") == "image" else lib
                            for lib in out["libraries"]]
    if launch is not None:
        out["launch"] = launch
    if native_state:
        out["cuda_compat"] = native_state.get("cuda_compat")
        out["ldcache_refreshed"] = bool((native_state.get("ldcache") or {}).get("refreshed"))
    if warnings:
        out["warnings"] = list(warnings)
    if fp is None:
        out["missing"] = error or "no sample: the benchmark process ended before one was taken"
    return out


# ------------------------------------------------------------------------------------ comparison


def _libs(fp):
    out = {}
    for lib in (fp or {}).get("libraries") or []:
        out.setdefault(lib.get("name"), lib)
    return out


def _describe(lib):
    where = {"compat": "compat", "host": "from the host", "image": "from the image"}.get(lib.get("source"), "")
    return "%s %s %s" % (lib.get("name"), lib.get("version") or "(unversioned)", where)


def differences(native, container, native_name="native", container_name="container"):
    """What differs between a native and a container fingerprint besides isolation, as phrases
    ("native loaded libcuda 580.95.05 from the host, container libcuda 590.44.01 compat"); [] when they are
    like for like, or when either has no sample (nothing can be said)."""
    if not native or not container or "libraries" not in native or "libraries" not in container:
        return []
    a_name, b_name = native_name, container_name
    out = []
    a, b = _libs(native), _libs(container)
    for name in sorted(set(a) | set(b)):
        if name not in b:
            out.append("%s loaded %s, %s did not" % (a_name, _describe(a[name]).strip(), b_name))
        elif name not in a:
            out.append("%s loaded %s, %s did not" % (b_name, _describe(b[name]).strip(), a_name))
        elif (a[name].get("version"), a[name].get("source")) != (b[name].get("version"), b[name].get("source")):
            out.append("%s loaded %s, %s %s" % (a_name, _describe(a[name]).strip(), b_name,
                                                _describe(b[name]).strip()))
    env_a, env_b = native.get("env") or {}, container.get("env") or {}
    for key in sorted((set(env_a) | set(env_b)) - ISOLATION_ENV):
        if env_a.get(key) != env_b.get(key):
            out.append("%s differs: %s %r, %s %r" % (key, a_name, env_a.get(key), b_name, env_b.get(key)))
    if native.get("python") != container.get("python"):
        out.append("Python %s in %s, %s in %s" % (native.get("python"), a_name, container.get("python"), b_name))
    pa, pb = native.get("packages") or {}, container.get("packages") or {}
    for name in sorted(set(pa) | set(pb)):
        if pa.get(name) != pb.get(name):
            out.append("%s %s in %s, %s in %s" % (name, pa.get(name), a_name, pb.get(name), b_name))
    return out
