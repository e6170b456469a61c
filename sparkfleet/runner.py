"""Drive a sparkfleet playbook through ansible-runner; its event stream, folded into progress events, feeds a
live display.

The run uses the repo's ``ansible.cfg`` (``ANSIBLE_CONFIG``), the repo root as project dir and a throw-away
private data dir. ansible-runner hands each of the playbook's events to ``event_handler`` (on its own thread);
they are queued, and the caller's thread folds them (``sparkfleet.progress.RunnerEvents``) and passes the
progress events on. The caller's environment is passed through (ansible-runner seeds the child's environment
with it); ``env`` entries override it. Host-key checking stays on (ansible-runner would otherwise turn it off).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.fields import type_name
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import procstat
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.files import check_dir, read_text, read_yaml
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import setting_problems
from sparkfleet.progress import RunnerEvents

REPO = Path(__file__).resolve().parents[1]


@dataclass
class RunRequest:
    inventory: str | None
    playbook: str = "bench.yml"
    extra_vars: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunOutcome:
    rc: int
    status: str
    stdout_tail: list[str]
    #: the controller's campaign directories the play hosts were given (absolute), in the order seen
    campaign_dirs: list[str] = field(default_factory=list)
    #: the playbook's final counters per host (playbook_on_stats), None when it never got there
    stats: dict[str, dict[str, int]] | None = None
    cancelled: bool = False
    #: the signal that cancelled it: "SIGINT" (Ctrl-C) or "SIGTERM"; None when not cancelled
    signal: str | None = None
    #: host -> the reproducibility tolerance (percent) its plan carried
    tolerances: dict[str, float] = field(default_factory=dict)


def resolve_inventory(value: str) -> str:
    """An inventory path made absolute (it must be readable), or Ansible's inline host list as it is."""
    path = Path(value).expanduser()
    if path.is_dir():
        return str(check_dir(path, "inventory directory").resolve())
    if path.exists() or path.is_symlink():
        read_text(path, "inventory")  # a FIFO, no permission, not UTF-8, too large: one line naming it
        return str(path.resolve())
    if "," in value:  # Ansible's inline host list, e.g. "spark1,spark2,"
        return value
    raise UsageError(f"inventory {value}: no such file or directory")


def _resolve_playbook(value: str) -> str:
    for candidate in (Path(value).expanduser(), REPO / value):
        if candidate.is_file():
            return str(candidate.resolve())
    raise UsageError(f"playbook {value}: no such file (looked in the current directory and {REPO})")


def _extra_var_args(extra_vars: list[str]) -> list[str]:
    args = []
    for value in extra_vars:
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            _check_extra_vars_file(path)
            value = "@" + str(path.resolve())
        args += ["-e", value]
    return args


def _check_extra_vars_file(path: Path) -> None:
    """An ``-e @FILE`` is read here first: an unreadable or malformed file, or a campaign in it that
    validation refuses, is one line naming the file (exit 2) before ansible-playbook starts."""
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import WRAPPER_KEY, resolve  # noqa: PLC0415

    data = read_yaml(path, "extra vars file")
    if data is None:
        return
    if not isinstance(data, dict):
        raise UsageError(f"{path}: extra vars must be a mapping, got {type_name(data)}")
    if WRAPPER_KEY in data:
        resolve(data[WRAPPER_KEY], source=str(path))
    errors, _ = setting_problems(str(path), data)  # the sparkfleet_* settings in it, as validate.yml checks them
    if errors:
        raise UsageError("; ".join(errors))


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum():
            raise UsageError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    return env


def runner_kwargs(request: RunRequest, private_data_dir: str) -> dict[str, Any]:
    """Keyword arguments for ``ansible_runner.run``/``run_async`` (without callbacks)."""
    if not (REPO / "ansible.cfg").is_file():
        raise UsageError(f"{REPO}/ansible.cfg not found: sparkfleet run needs the sparkfleet repo checkout")
    playbook = _resolve_playbook(request.playbook)
    # The inventory goes on the command line as given: ansible-runner would write a non-path string (an
    # inline host list such as "spark1,spark2,") into an inventory file of its own. None given: no -i, so
    # ansible-playbook takes ansible.cfg's (ANSIBLE_CONFIG below; inventory/local.ini, this machine).
    inventory = ["-i", resolve_inventory(request.inventory)] if request.inventory else []
    envvars = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING", "True"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        **request.env,
    }
    return {"private_data_dir": private_data_dir, "project_dir": str(REPO), "playbook": playbook,
            "envvars": envvars, "quiet": True, "json_mode": False,
            "cmdline": shlex.join([*inventory, *_extra_var_args(request.extra_vars)])}


def descendants(root: int) -> list[tuple[int, int | None]]:
    """(pid, start ticks) of every process below ``root``, whatever its session, from /proc ([] without one)."""
    stats = {pid: procstat.read(pid) for pid in procstat.pids()}
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        if procstat.live(stat):
            children.setdefault(stat.ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, stats[child].start_ticks))
            todo.append(child)
    return found


def end_processes(processes: list[tuple[int, int | None]], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, each process still the one listed (same start ticks)."""
    def alive() -> list[int]:
        return [pid for pid, ticks in processes
                if procstat.live(stat := procstat.read(pid)) and stat.start_ticks == ticks]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt: both cancel the playbook the same way."""


def _raise_terminated(signum, frame):
    raise Terminated


def run_playbook(request: RunRequest, on_events: Callable[[list[dict[str, Any]]], None],
                 poll_s: float = 0.2) -> RunOutcome:
    """Run the playbook; call ``on_events`` with each batch of new progress events (also with [] to tick).

    Ctrl-C (SIGINT) or SIGTERM cancels it: ansible-runner kills ansible-playbook's process group, and every
    process below this one is ended (its workers, in sessions of their own, and their modules and ssh): nothing
    of the playbook is left behind. The outcome says ``cancelled`` with the signal. What the playbook started on
    the hosts runs on: the caller stops it (`sparkfleet run` runs playbooks/restore.yml for its run token)."""
    import ansible_runner  # heavy import, only for this command

    private = tempfile.mkdtemp(prefix="sparkfleet-run-")
    events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    folder = RunnerEvents()

    def drain() -> None:
        batch = []
        while not events.empty():
            batch += folder.fold(events.get())
        on_events(batch)

    def on_runner_event(event: dict[str, Any]) -> bool:
        events.put(event)  # runner's thread: folded on ours
        return True  # ansible-runner keeps its artifact copy too (in the throw-away private data dir)

    main = threading.current_thread() is threading.main_thread()  # signal handlers: the main thread's only
    previous_term = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    received, tree = None, []
    try:
        kwargs = runner_kwargs(request, private)
        cancelled = threading.Event()
        thread, runner = ansible_runner.run_async(cancel_callback=cancelled.is_set, event_handler=on_runner_event,
                                                  **kwargs)
        while thread.is_alive():
            try:
                thread.join(poll_s)
                drain()
            except KeyboardInterrupt as exc:  # a second one while the cancel goes through changes nothing
                if not received:
                    # ansible-runner kills ansible-playbook's process group, but its workers run in sessions of
                    # their own (ansible-core >= 2.19), each with its module or ssh: they are ended below.
                    tree = descendants(os.getpid())
                received = received or ("SIGTERM" if isinstance(exc, Terminated) else "SIGINT")
                cancelled.set()
        if received:
            end_processes(tree)
        drain()
        if cancelled.is_set():
            rc = 143 if received == "SIGTERM" else 130
        else:
            rc = runner.rc if isinstance(runner.rc, int) else 1
        dirs = [str(REPO / d) for d in folder.campaign_dirs]  # relative to runner's cwd, REPO
        return RunOutcome(rc=rc, status=str(runner.status), stdout_tail=_stdout_tail(runner), campaign_dirs=dirs,
                          stats=folder.stats, cancelled=cancelled.is_set(), tolerances=folder.tolerances,
                          signal=received)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous_term)
        shutil.rmtree(private, ignore_errors=True)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _stdout_tail(runner, lines: int = 25, width: int = 400) -> list[str]:
    """The last lines of ansible-playbook's output, without colours, each cut to ``width``."""
    try:
        with runner.stdout as fh:
            text = fh.read()
    except (OSError, AttributeError, ValueError):
        return []
    out = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    return [line if len(line) <= width else line[: width - 1] + "…" for line in out if line][-lines:]
