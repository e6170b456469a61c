# -*- coding: utf-8 -*-
"""One benchmark run, start to finish: argv per engine, launch in its environment, timeout, record.

Used by the ``bench_run`` module. Kept apart from the module so the pieces (argv building, provenance,
container cgroup lookup) are testable without Ansible.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import time

from ..engines import serving, trtllm_cli
from ..rootfs.chroot import ChrootError, chroot_argv, load_image_config, stale_marker_warning
from ..sensors.memstate import cgroup_dir_of_pid

#: Where the standalone workload scripts are installed, relative to the results root (visible at the
#: same path natively, in the chroot and in the container).
WORKLOADS_SUBDIR = ".sparkfleet/workloads"
#: hf-generate's Inductor cache (TORCHINDUCTOR_CACHE_DIR), relative to the results root: one per host, the same
#: in every environment, so a kernel tuned in one run is read back by all the others (native and container
#: alike) instead of each environment tuning its own, with its own outcome.
COMPILE_CACHE_SUBDIR = ".sparkfleet/inductor-cache"
#: Words of a flag or variable name that mark its value as a secret. A name is split into words at '_', '-',
#: '.' and lower-to-upper case changes: HF_TOKEN, --hf-token, hfToken, OPENAI_API_KEY are secrets;
#: TOKENIZERS_PARALLELISM and --max_num_tokens are not (a word must BE the secret word, or end with it:
#: GHTOKEN, DBPASSWORD).
SECRET_WORDS = frozenset(("token", "password", "passwd", "passphrase", "secret", "auth", "credential",
                          "credentials", "apikey", "pat"))
SECRET_SUFFIXES = ("token", "password", "passwd", "secret", "apikey")
SECRET_PAIRS = frozenset((("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                          ("client", "secret")))
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+|[0-9]+")
KILL_GRACE_S = 10


class RunSetupError(Exception):
    """The run could not be launched as asked (bad environment settings, missing rootfs, ...)."""


# ------------------------------------------------------------------------------------------ argv


def engine_steps(engine: str, workload: dict, model: dict, run_dir: str, workloads_dir: str, trtllm=None,
                 hf_cache: bool = False) -> list:
    """The commands one run executes inside its environment, in order: [(name, argv, stdout_path), ...].

    The last step is the measured one; its output is bench.log. ``stdout_path`` (else None) is a file the
    step's standard output goes to (its standard error still goes to its log). Arguments are list elements,
    never shell text: a model name with spaces or `$()` reaches the engine literally.

    ``trtllm`` (engine trtllm): the image's TensorRT-LLM detection (trtllm_cli.detect, the engine_probe
    module), optionally with ``unknown_version``; the commands are built for that version (trtllm_cli).
    ``hf_cache``: a Hugging Face cache is bound (else the tokenizer must come from ``model.path``).
    """
    extra = [str(a) for a in (workload.get("extra_args") or [])]
    name = str(model.get("name") or "")
    path = model.get("path")
    if engine == "matmul":
        argv = ["python3", f"{workloads_dir}/matmul.py", "--model", name,
                "--iterations", str(workload.get("iterations", 10)), "--warmup", str(workload.get("warmup", 1))]
        if workload.get("size"):
            argv += ["--size", str(workload["size"])]
        return [("bench", argv + extra, None)]
    if engine == "hf-generate":
        argv = ["python3", f"{workloads_dir}/hf_generate.py", "--model", str(path or name),
                "--batch", str(workload.get("batch", 1)), "--input-len", str(workload.get("input_len", 128)),
                "--output-len", str(workload.get("output_len", 128)),
                "--iterations", str(workload.get("iterations", 10)), "--warmup", str(workload.get("warmup", 2))]
        return [("bench", argv + extra, None)]
    if serving.is_serving({**workload, "engine": engine}):  # the server; its client runs on the host (Launcher.serve)
        try:
            return [("server", serving.server_argv(workload, model), None)]
        except serving.ServingError as exc:
            raise RunSetupError(str(exc)) from None
    if engine == "trtllm":
        try:
            return trtllm_cli.steps(workload, model, run_dir, trtllm_cli.resolve(trtllm), hf_cache=hf_cache)
        except trtllm_cli.TrtllmCliError as exc:
            raise RunSetupError(str(exc)) from None
    raise RunSetupError(f"engine {engine!r} is not supported by the run executor")


def is_secret_name(name: str) -> bool:
    """Whether a flag or environment variable name (``--hf_token``, ``OPENAI_API_KEY``) names a secret."""
    words = [w.lower() for w in _NAME_WORDS.findall(str(name))]
    if any(w in SECRET_WORDS or w.endswith(SECRET_SUFFIXES) for w in words):
        return True
    return any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))  # noqa: B905 (Python 3.8)


def redact(argv: list) -> list:
    """argv for the record: values of secret-looking flags and environment assignments hidden."""
    out, hide_next = [], False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if arg.startswith("-") and is_secret_name(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        if "=" in arg and not arg.startswith("-") and is_secret_name(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=***")
            continue
        out.append(arg)
    return out


# ---------------------------------------------------------------------------------- environments


def native_command(rootfs: str, image_env: dict, argv: list, env: dict, cwd: str, warnings=None) -> list:
    """What ``container_command`` runs, minus the namespaces and cgroups: the image's Entrypoint + argv (as
    ``docker run IMAGE argv`` does), its Env and HOME default, the run directory as ``--workdir``.

    The image config comes from the rootfs marker. A marker without it (schema 1) runs argv directly and
    appends a one-line warning to ``warnings`` (when given)."""
    if not rootfs or not os.path.isdir(rootfs):
        raise RunSetupError(f"native rootfs {rootfs!r} does not exist: run playbooks/provision.yml first")
    try:
        config = load_image_config(rootfs)
    except ChrootError as exc:
        raise RunSetupError(str(exc)) from None
    note = stale_marker_warning(rootfs, config)
    if note and warnings is not None and note not in warnings:
        warnings.append(note)
    return chroot_argv(rootfs, image_env, argv, extra_env=env, cwd=cwd, config=config)


#: The env(1) a bare run's commands start through (in the run directory, with the run's variables).
ENV_BIN = "/usr/bin/env"
#: Where a bare run's command is looked for after the login shell's PATH and the module's own: the user's
#: ``pip install --user`` directory and the usual system ones (Ansible runs modules with a minimal PATH).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
USER_BIN = "~/.local/bin"
#: The longest wait for the login shell that says its PATH.
LOGIN_PATH_TIMEOUT_S = 15.0
_PATH_MARK = "__sparkfleet_path__="
_LOGIN_PATHS = {}  # uid -> (PATH or None, why not): a login shell is asked once per process


def login_path(timeout_s: float = LOGIN_PATH_TIMEOUT_S):
    """(the PATH a login shell of the user this runs as has - what ``which llama-server`` at their prompt
    searches -, None; or None and why it could not be read). Their shell from the password database, ``-l -c``,
    stdin closed; read once per process."""
    uid = os.getuid()
    if uid in _LOGIN_PATHS:
        return _LOGIN_PATHS[uid]
    try:
        shell = pwd.getpwuid(uid).pw_shell
    except KeyError:
        shell = None
    if not shell or os.path.basename(shell) in ("nologin", "false") or not os.access(shell, os.X_OK):
        shell = "/bin/sh"
    try:
        proc = subprocess.run([shell, "-l", "-c", 'echo "%s$PATH"' % _PATH_MARK], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=timeout_s, text=True, errors="replace")
        lines = [ln[len(_PATH_MARK):] for ln in proc.stdout.splitlines() if ln.startswith(_PATH_MARK)]
        found = (lines[-1].strip() or None, None) if lines else (
            None, "%s -l exited %s without saying its PATH" % (shell, proc.returncode))
    except (OSError, subprocess.TimeoutExpired) as exc:
        found = (None, "%s -l: %s" % (shell, exc))
    _LOGIN_PATHS[uid] = found
    return found


def host_path(login=None, module_path=None) -> str:
    """The PATH a bare run's commands are found on: the login shell's PATH (``login``: default
    :func:`login_path`'s), then the module's own PATH, then ~/.local/bin and the system directories
    (:data:`SYSTEM_PATH`); each directory once, in that order, relative ones left out."""
    if login is None:
        login = login_path()[0] or ""
    if module_path is None:
        module_path = os.environ.get("PATH", "")
    dirs = []
    for part in [*login.split(":"), *module_path.split(":"), os.path.expanduser(USER_BIN), *SYSTEM_PATH]:
        if part.startswith("/") and part not in dirs:
            dirs.append(part)
    return ":".join(dirs)


def bare_env(argv: list, env: dict, path=None, check: bool = True):
    """(a bare run's variables with PATH among them, the executable argv[0] resolves to or None). PATH: the
    workload's or the inventory's when either gives one, else ``path`` (default :func:`host_path`). With
    ``check``, a command not found there raises RunSetupError naming it and every directory searched."""
    env = {str(k): str(v) for k, v in env.items()}
    given = "PATH" in env
    if not given:
        env["PATH"] = host_path() if path is None else path
    exe = str(argv[0]) if argv else ""
    if "/" not in exe:
        found = shutil.which(exe, path=env["PATH"]) if exe else None
    else:
        found = exe if not os.path.isabs(exe) or os.access(exe, os.X_OK) else None
    if check and exe and not found:
        where = ("the PATH the workload's env or sparkfleet_workload_env gives" if given else
                 "the host's PATH: its login shell's, the module's, %s and the system directories" % USER_BIN)
        raise RunSetupError("bare run: %s not found on %s (%s): install it there, or give its directory in the "
                            "PATH of sparkfleet_workload_env or the workload's env" % (exe, where, env["PATH"]))
    return env, found


def bare_command(argv: list, env: dict, cwd: str, path=None, check: bool = True) -> list:
    """A bare run's command: env(1) in the run directory with the run's variables and PATH (:func:`bare_env`),
    then argv."""
    env, _ = bare_env(argv, env, path, check)
    return [ENV_BIN, "-C", cwd] + ["%s=%s" % kv for kv in env.items()] + [str(a) for a in argv]


def strip_gpu_flags(flags: list) -> list:
    """Drop `--gpus X` / `--gpus=X` (a host without an NVIDIA container runtime cannot honour them)."""
    out, skip = [], False
    for flag in flags:
        if skip:
            skip = False
            continue
        if flag == "--gpus":
            skip = True
            continue
        if str(flag).startswith("--gpus="):
            continue
        out.append(flag)
    return out


def container_command(docker: str, name: str, image: str, flags: list, argv: list, env: dict, cwd: str,
                      binds: list, labels: dict) -> list:
    if not image:
        raise RunSetupError("container environment without an image")
    cmd = [docker, "run", "--name", name, "--init"]
    for key, value in labels.items():
        cmd += ["--label", f"{key}={value}"]
    cmd += [str(f) for f in flags]
    for src, dest, read_only in binds:
        cmd += ["--mount", f"type=bind,source={src},target={dest}" + (",readonly" if read_only else "")]
    for key, value in env.items():
        cmd += ["--env", f"{key}={value}"]
    cmd += ["--workdir", cwd, image]
    return cmd + [str(a) for a in argv]


def placed_command(container: str, argv: list, env: dict, cwd: str, environment, labels=None) -> tuple:
    """(the command that runs ``argv`` in ``environment``, the executable /proc shows once it runs, {name, docker}
    of its container or None), for a process beside a run (a cluster worker, a probe), placed as the run's own
    commands are. ``environment``: {kind, name; native: rootfs, image_env; container: image, docker, docker_flags,
    gpu_present (false drops --gpus), results_root (bound in when given), models_dir (when it exists)}; None or
    bare: on the host. A container gets the host's network (it listens on the node's own address) and is named
    ``container``."""
    environment = environment or {}
    kind = environment.get("kind") or "bare"
    if kind == "bare":
        return bare_command(argv, env, cwd), bare_env(argv, env)[1], None
    if kind == "native":
        cmd = native_command(environment.get("rootfs"), environment.get("image_env") or {}, argv, env, cwd)
        return cmd, chroot_program(cmd), None
    if kind != "container":
        raise RunSetupError("unknown environment kind %r" % kind)
    flags = environment.get("docker_flags")
    if flags is None:
        raise RunSetupError("no docker flags resolved for environment %r" % environment.get("name"))
    if not environment.get("gpu_present", True):
        flags = strip_gpu_flags(flags)
    flags, _ = serving.with_host_network(flags)
    root, models = environment.get("results_root"), environment.get("models_dir")
    binds = [(root, root, False)] if root else []
    if models and os.path.isdir(models):
        binds.append((models, models, True))
    docker = environment.get("docker") or "docker"
    cmd = container_command(docker, container, environment.get("image"), flags, argv, env, cwd, binds, labels or {})
    return cmd, docker, {"name": container, "docker": docker}


def chroot_program(cmd: list) -> str:
    """The program a chroot command ends in (chroot ROOTFS env -i [-C DIR] -- K=V... PROGRAM ...)."""
    rest = cmd[cmd.index("--") + 1:] if "--" in cmd else cmd
    return next((a for a in rest if "=" not in a), cmd[0])


def container_cgroup_memory_file(docker: str, name: str, timeout: float = 10.0):
    """The container's cgroup memory-usage file (v1 or v2), found through its init process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run([docker, "inspect", "--format", "{{.State.Pid}}", name],
                              capture_output=True, text=True, errors="replace")
        pid = proc.stdout.strip()
        if proc.returncode == 0 and pid not in ("", "0"):
            directory = cgroup_dir_of_pid(int(pid))
            if directory is None:
                return None
            v1 = os.path.join(directory, "memory.usage_in_bytes")
            return v1 if os.path.exists(v1) else os.path.join(directory, "memory.current")
        time.sleep(0.1)
    return None


# ----------------------------------------------------------------------------------------- launch


def run_process(cmd: list, log_path: str, timeout_s: float, on_start=None, on_timeout=None,
                stdout_path=None) -> dict:
    """Run argv with stdout+stderr appended to log_path; kill the whole process group at the timeout.

    ``stdout_path``: the standard output goes to this file instead (created or truncated), the standard
    error still to log_path (a step whose output is data, e.g. a dataset written with ``--stdout``)."""
    started = time.monotonic()
    with open(log_path, "ab") as log, contextlib.ExitStack() as stack:
        line = "$ " + " ".join(shlex.quote(str(a)) for a in redact(cmd))
        if stdout_path:
            line += " > " + shlex.quote(str(stdout_path))
        log.write((line + "\n").encode())
        log.flush()
        out = stack.enter_context(open(stdout_path, "wb")) if stdout_path else log
        # A stop (SIGTERM -> exception) must not fall between the start and the try below, or the workload
        # would outlive the job: hold the signal until the try is entered.
        held = serving.hold_sigterm()
        try:
            proc = subprocess.Popen([str(a) for a in cmd], stdout=out,
                                    stderr=log if stdout_path else subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_unblock_sigterm if held else None)
        except BaseException:
            serving.release_sigterm(held)
            raise
        timed_out = False
        try:
            serving.release_sigterm(held)
            if on_start:
                on_start(proc)
            rc = proc.wait(timeout=max(timeout_s, 0.001))
        except subprocess.TimeoutExpired:
            timed_out = True
            if on_timeout:
                on_timeout()
            _kill_group(proc)
            rc = proc.returncode
        except BaseException:  # the job is being stopped (SIGTERM): the workload goes with it
            if on_timeout:
                on_timeout()
            _kill_group(proc)
            raise
    return {"rc": rc, "timed_out": timed_out, "seconds": time.monotonic() - started}


def _unblock_sigterm() -> None:
    """In the child, before exec: the signal mask is inherited across exec, and a workload started while the
    job held SIGTERM would otherwise ignore the SIGTERM of a timeout or a stop (and die only by SIGKILL)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _kill_group(proc) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 30)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ------------------------------------------------------------------------------------- provenance


def _norm(text) -> str:
    return str(text or "").strip().rstrip("/").lower()


def model_matches(requested: dict, loaded) -> bool:
    """Does the model the log names match any way the campaign named it (name, HF id, path, basename)?"""
    got = _norm(loaded)
    if not got:
        return True
    names = {_norm(requested.get(k)) for k in ("name", "hf_id", "path")} - {""}
    names |= {n.rsplit("/", 1)[-1] for n in names}
    return got in names or got.rsplit("/", 1)[-1] in names
