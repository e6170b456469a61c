# Copyright: sparkfleet contributors
# Apache-2.0
"""Follow a host's background matrix job (bench_run under async) from its ledger, without Python on the host."""

from __future__ import annotations

import contextlib
import json
import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import ledger
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import checked_args as validated_args
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import marked_sections

MARK = "@@sparkfleet-follow@@"


def follow_command(results_file: str, ledger: str, jobs_dir: str) -> str:
    """One shell command: the async job file, the ledger and the live registered jobs' pids (cat/test only)."""
    q = shlex.quote
    return (f"printf '%s\\n' '{MARK} job'; cat {q(results_file)} 2>/dev/null; "
            f"printf '\\n%s\\n' '{MARK} ledger'; cat {q(ledger)} 2>/dev/null; "
            f"printf '\\n%s\\n' '{MARK} alive'; "
            f"for f in {q(jobs_dir)}/*.json; do [ -e \"$f\" ] || continue; p=${{f##*/}}; p=${{p%.json}}; "
            f"[ -d /proc/$p ] && echo $p; done; true")


def parse_follow_output(text: str) -> dict:
    """Split follow_command's output into the job state (dict or None), ledger events and live pids."""
    parts = {"job": "", "ledger": "", "alive": ""}
    for name, body in marked_sections(text, MARK):
        if name in parts:
            parts[name] += body
    job = None
    if parts["job"].strip():
        with contextlib.suppress(ValueError):  # written while we read it: the next poll sees it whole
            job = json.loads(parts["job"])
    events = ledger.parse_events(parts["ledger"].splitlines())
    alive = [int(p) for p in parts["alive"].split() if p.isdigit()]
    return {"job": job, "events": events, "alive": alive}


def job_finished(job) -> bool:
    """async_wrapper's file: {started: 1, finished: 0, ...} while running, the module's result after."""
    return isinstance(job, dict) and not (job.get("started") == 1 and job.get("finished") == 0)


def progress_events(events: list, total) -> list:
    """One event per finished run (last finish wins), in ledger order, shaped like bench_run's sparkfleet_event.

    Runs finished before the last ``job`` event were done by an earlier job: this job skips them.
    """
    last_job = max((i for i, e in enumerate(events) if e.get("event") == "job"), default=-1)
    position = {id(e): i for i, e in enumerate(events)}
    out = []
    for e in ledger.last_by_run(events, kinds=("finished",)).values():
        earlier = position[id(e)] < last_job
        out.append({"type": "run", "run_id": e["run_id"], "order_index": e.get("order_index"), "total": total,
                    "status": "skipped" if earlier else e.get("status"),
                    "previous_status": e.get("status") if earlier else None,
                    "duration_s": e.get("duration_s"), "cooldown_s": e.get("cooldown_s"),
                    "model": e.get("model"), "environment": e.get("environment"), "workload": e.get("workload"),
                    "iteration": e.get("iteration"), "warmup": e.get("warmup"), "finished_ts": e.get("ts")})
    return out


def current_run(events: list):
    """The run started last and not finished since, or None."""
    running = [rid for rid, e in ledger.last_by_run(events).items() if e["event"] == "started"]
    return running[-1] if running else None


def point_events(events: list) -> list:
    """The ``point`` events of the two runs that changed last (the current one and the one finished before it,
    whose last points may have come since the previous return), each from its run's latest ``started`` on (a
    resumed run's earlier attempt is not its progress) and with that start's time as ``run_started_ts``."""
    starts = {e["run_id"]: (i, e.get("ts")) for i, e in enumerate(events)
              if e.get("event") == "started" and e.get("run_id")}
    wanted = set(list(ledger.last_by_run(events, kinds=("started", "finished")))[-2:])
    return [dict(e, run_started_ts=starts[e["run_id"]][1]) for i, e in enumerate(events)
            if e.get("event") == "point" and e.get("run_id") in wanted and e["run_id"] in starts
            and i > starts[e["run_id"]][0]]


def final_events(result: dict, events: list) -> list:
    """The finished job's own per-run events (authoritative: skipped is skipped), with the ledger's finish time."""
    ts = {e["run_id"]: e.get("ts") for e in events if e.get("event") == "finished" and e.get("run_id")}
    return [dict(e, finished_ts=ts.get(e.get("run_id"))) for e in result.get("sparkfleet_events") or []
            if isinstance(e, dict)]


def point_line(host: str, point: dict) -> str:
    """What a person watching plain ansible-playbook sees when a serving run's point finishes."""
    took = point.get("duration_s")
    took = f" in {float(took):.1f} s" if isinstance(took, (int, float)) else ""
    return f"{host}: point {point.get('k')}/{point.get('n')} {point.get('status')}{took} ({point.get('point')})"


def point_key(point: dict) -> tuple:
    return (point.get("run_id"), point.get("run_started_ts"), point.get("k"), point.get("phase"))


def progress_line(host: str, event: dict, done: int, total) -> str:
    """What a person watching plain ansible-playbook sees when a run finishes."""
    cell = "/".join(str(event.get(k) or "?") for k in ("model", "environment", "workload"))
    took = event.get("duration_s")
    took = f" in {float(took):.1f} s" if isinstance(took, (int, float)) else ""
    return f"{host}: run {done}/{total if total is not None else '?'} {event.get('status')}{took} " \
           f"({cell} #{event.get('iteration')})"


#: The options documented in plugins/modules/bench_follow.py (a test checks that the two agree).
ARGUMENT_SPEC = {
    "job": {"type": "dict", "required": True},
    "ledger": {"type": "str", "required": True},
    "jobs_dir": {"type": "str", "required": True},
    "total": {"type": "int"},
    "poll_interval_s": {"type": "float", "default": 2.0},
    "report_after_s": {"type": "float", "default": 60.0},
    "lost_after_s": {"type": "float", "default": 15.0},
}


def ran_in_foreground(job) -> bool:
    """A bench_run result that is already the job's end (check mode runs the task without async)."""
    return isinstance(job, dict) and not job.get("results_file") and isinstance(job.get("runs"), list)


def checked_args(args: dict) -> dict:
    """The task's arguments typed and defaulted by ARGUMENT_SPEC; AnsibleActionFail naming each bad one."""
    job = args.get("job")
    if not isinstance(job, dict) or not (job.get("results_file") or ran_in_foreground(job)):
        raise AnsibleActionFail("job: give the registered result of the async bench_run task "
                                "(it needs results_file; was the task run with async and poll: 0?)")
    params = validated_args(ARGUMENT_SPEC, args)
    for key in ("ledger", "jobs_dir"):
        if not params[key]:
            raise AnsibleActionFail(f"{key} is required")
    for key in ("poll_interval_s", "report_after_s", "lost_after_s"):
        if not params[key] > 0:
            raise AnsibleActionFail(f"{key} must be positive")
    return params


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _printed(self, task_vars) -> tuple:
        """How many finished runs, and which points (point_key), the previous until-retry of this task printed:
        its registered result (Ansible hands it to the next attempt in task_vars) says what it returned. Every
        result lists all runs finished so far, so a consumer of the results (sparkfleet run) dedupes them itself."""
        register = getattr(self._task, "register", None)
        # ansible-core 2.19: the variable's name; 2.21: {name: expression} (register projections)
        names = list(register) if isinstance(register, dict) else [register] if isinstance(register, str) else []
        previous = next((v for v in map(self._registered(task_vars), names) if isinstance(v, dict)), None)
        if isinstance(previous, dict) and previous.get("finished") is False and previous.get("attempts"):
            done = previous.get("done")
            points = {point_key(p) for p in previous.get("sparkfleet_points") or () if isinstance(p, dict)}
            return (done if isinstance(done, int) and done >= 0 else 0), points
        return 0, set()  # the first attempt (a value registered by an earlier run of the task is a finished one)

    def _registered(self, task_vars):
        """name -> the registered value as a dict: on 2.21 it is a lazy projection that templating resolves."""
        def value(name):
            found = (task_vars or {}).get(name)
            if found is None or isinstance(found, dict):
                return found
            try:
                return self._templar.template(found)
            except Exception:  # noqa: BLE001 - not resolvable: the lines are shown again, nothing is lost
                return None
        return value

    def _show(self, task_vars, shown: int, done: list, total, points: list, printed: set) -> None:
        """Print each run and each serving point finished since the previous attempt, once, in the host's order
        (ledger times); ``printed`` (point keys) grows by the points shown."""
        host = (task_vars or {}).get("inventory_hostname") or "?"
        lines = [(str(done[i].get("finished_ts") or ""), progress_line(host, done[i], i + 1, total))
                 for i in range(shown, len(done))]
        lines += [(str(p.get("ts") or ""), point_line(host, p)) for p in points
                  if p.get("phase") == "finished" and point_key(p) not in printed]
        for _, line in sorted(lines, key=lambda pair: pair[0]):
            self._display.display(line)
        printed.update(point_key(p) for p in points)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = checked_args(self._task.args)
        job = args["job"]
        if ran_in_foreground(job):
            result.update({k: v for k, v in job.items() if not k.startswith("_ansible") and k != "invocation"})
            result.update(finished=True, changed=bool(job.get("changed")))
            return result
        poll, report_after, lost_after = args["poll_interval_s"], args["report_after_s"], args["lost_after_s"]
        total = args.get("total")
        cmd = follow_command(job["results_file"], args["ledger"], args["jobs_dir"])
        shown, printed = self._printed(task_vars)
        started = time.monotonic()
        baseline = None
        nobody_since = None
        while True:
            out = self._low_level_execute_command(cmd)
            if out.get("rc") not in (0, None):
                raise AnsibleActionFail(f"could not read the job's state: {out.get('stderr', '').strip()}")
            state = parse_follow_output(out.get("stdout", ""))
            events = state["events"]
            done = progress_events(events, total)
            points = point_events(events)
            if job_finished(state["job"]):
                self._show(task_vars, shown, done, total, points, printed)
                self._low_level_execute_command(f"rm -f {shlex.quote(job['results_file'])}")
                final = state["job"]
                result.update({k: v for k, v in final.items() if not k.startswith("_ansible")
                               and k not in ("invocation", "started", "finished")})
                result.update(finished=True, changed=bool(final.get("changed")),
                              sparkfleet_events=final_events(final, events) or done, sparkfleet_points=points)
                if final.get("failed"):
                    result["failed"] = True
                    result["msg"] = final.get("msg") or "the matrix job failed"
                return result
            now = time.monotonic()
            # The job file says "running" but no registered bench_run lives: the host rebooted or the job died.
            if state["alive"]:
                nobody_since = None
            elif nobody_since is None:
                nobody_since = now
            elif now - nobody_since >= lost_after:
                result.update(finished=True, failed=True, sparkfleet_events=done, done=len(done),
                              sparkfleet_points=points,
                              msg=f"the matrix job is gone: no bench_run process runs and {job['results_file']} "
                                  "says it never finished (host rebooted or job killed?); run bench.yml again "
                                  "to resume")
                return result
            if baseline is None:
                baseline = len(done)
            self._show(task_vars, shown, done, total, points, printed)
            shown = max(shown, len(done))
            if len(done) > baseline or now - started >= report_after:
                result.update(finished=False, changed=False, sparkfleet_events=done, done=len(done),
                              total=total, current=current_run(events), sparkfleet_points=points)
                return result
            time.sleep(poll)
