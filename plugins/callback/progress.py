# Copyright: sparkfleet contributors
# Apache-2.0
"""sparkfleet progress/ETA notification callback: one JSON object per line."""

from __future__ import annotations

DOCUMENTATION = r"""
name: progress
type: notification
short_description: Write sparkfleet run progress and ETA as JSON lines
description:
  - Appends one JSON object per line to a file while a playbook runs, so that a controller (C(sparkfleet run))
    or any other tool can tail it and show per-host progress and an ETA.
  - Needs to be enabled (C(ANSIBLE_CALLBACKS_ENABLED=sparkfleet.bench.progress) or C(callbacks_enabled) in
    C(ansible.cfg)) and given a file; without a file it does nothing.
  - Works under plain C(ansible-playbook) and under ansible-runner; it never touches stdout.
  - Each line is written with a single C(write) on a file opened for appending and flushed at once, so a
    reader never sees half a line unless it reads while that one write is in progress (readers should only
    consume lines ending in a newline). The file is appended to, never truncated.
  - "Event contract. Every line has C(event) and C(ts) (UTC seconds since the epoch, float)."
  - "C(playbook_start): C(playbook) (file name)."
  - "C(play_start): C(name) (the play's name)."
  - "C(planned): C(host), C(total) (number of planned runs), C(campaign) (when known), C(next_cell). Emitted
    when a task result's C(ansible_facts) holds C(sparkfleet_plan), a host's plan from
    M(sparkfleet.bench.campaign_plan) whose C(runs) (or the list itself) are the planned runs (each with
    C(run_id), C(order_index), C(model.name), C(environment.name), C(workload.name), C(iteration), C(warmup)).
    C(campaign) comes from a plan entry's C(campaign) key or from an earlier C(sparkfleet_resolved_campaign.name)
    fact of that host."
  - "Run events: when a task result or a loop item's result has a top-level C(sparkfleet_event) dict (for
    example C(type=run), C(run_id), C(order_index), C(status) one of ok/failed/timeout/invalid/skipped,
    C(duration_s), C(cooldown_s), C(model), C(environment), C(workload), C(iteration)), that dict is written
    with C(event) set to its C(type) (default C(run)) and C(host), C(ts), C(cell) (C(model/environment/workload),
    names taken from strings or from dicts' C(name)), C(done), C(total), C(eta_s) and C(next_cell) added.
    C(done) counts the host's run events so far (distinct C(run_id)s, so a retried run counts once);
    C(total) is the host's planned total (without a C(planned) event, the event's own C(total) if it has
    one, else null); C(eta_s) is (total - done) x the mean of C(duration_s + cooldown_s) over the host's
    runs whose status is not C(skipped) and that report a C(duration_s) (a missing C(cooldown_s) counts as
    0), null until one such run was seen; C(cell) is null when the event names no model, environment or
    workload; C(next_cell) is the cell of the first planned run (by
    C(order_index)) with no event yet, or null. Events of another C(type) get C(host), C(ts), C(cell) only."
  - "A result may instead carry C(sparkfleet_events), a list of such dicts (the matrix's C(bench_follow)
    returns one per finished run each time it polls, also on C(until) retries): each is written as above,
    once - an event whose C(run_id) and C(finished_ts) were written before for that host is not written again."
  - "C(host_failed): C(host), C(task), C(msg); a task failed on a host and its errors were not ignored."
  - "C(host_unreachable): C(host), C(task), C(msg)."
  - "C(stats): at the end, C(hosts) maps each host to C(ok), C(changed), C(failed), C(unreachable),
    C(skipped), C(rescued), C(ignored)."
options:
  path:
    description: File the JSON lines are appended to. Unset or empty means the callback does nothing.
    type: path
    env:
      - name: SPARKFLEET_PROGRESS_FILE
    ini:
      - section: callback_sparkfleet_progress
        key: path
"""

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402


def _name(value):
    if isinstance(value, dict):
        value = value.get("name")
    return "" if value is None else str(value)


def _message(result, default):
    """The result's message; for a loop, the first item's (the task's own says only "All items completed")."""
    msg = result.get("msg")
    items = result.get("results")
    if isinstance(items, list):
        items = [i for i in items if isinstance(i, dict) and i.get("msg")]
        # ansible-core >= 2.21 keeps "failed" out of the item results it hands to callbacks: fall back to
        # an item with an exception, then to any item with a message.
        for test in (lambda i: i.get("failed") or i.get("unreachable"), lambda i: "exception" in i, bool):
            found = [i for i in items if test(i)]
            if found:
                msg = found[0]["msg"]
                break
    return str(msg or result.get("stderr") or default)


def _cell(item):
    names = [_name(item.get(k)) for k in ("model", "environment", "workload")]
    return "/".join(names) if any(names) else None


class _HostProgress:
    def __init__(self):
        self.plan = []
        self.total = None
        self.done_ids = set()
        self.done_anon = 0
        self.spent = []  # duration_s + cooldown_s of non-skipped runs
        self.seen = set()  # (run_id, finished_ts) of list events already written

    @property
    def done(self):
        return len(self.done_ids) + self.done_anon

    def eta(self):
        if self.total is None or not self.spent:
            return None
        remaining = max(self.total - self.done, 0)
        return round(remaining * sum(self.spent) / len(self.spent), 1)

    def next_cell(self):
        for item in self.plan:
            if item.get("run_id") not in self.done_ids:
                return _cell(item)
        return None


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "sparkfleet.bench.progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = None
        self._fd = None
        self._hosts = {}
        self._campaign = {}

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        self._path = self.get_option("path") or None

    # ---- output -------------------------------------------------------------------------------
    def _emit(self, event, **fields):
        if not self._path:
            return
        record = {"event": event}
        record.update(fields)
        record["ts"] = round(time.time(), 3)
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        try:
            if self._fd is None:
                directory = os.path.dirname(self._path)
                if directory and not os.path.isdir(directory):
                    os.makedirs(directory)
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, line.encode("utf-8"))  # one write per line: O_APPEND keeps lines whole
        except OSError as exc:
            self._display.warning(f"sparkfleet.bench.progress: cannot write {self._path}: {exc}")
            self._path = None

    def _host(self, name):
        if name not in self._hosts:
            self._hosts[name] = _HostProgress()
        return self._hosts[name]

    # ---- result inspection --------------------------------------------------------------------
    def _inspect(self, host, result):
        if not isinstance(result, dict):
            return
        facts = result.get("ansible_facts")
        if isinstance(facts, dict):
            resolved = facts.get("sparkfleet_resolved_campaign")
            if isinstance(resolved, dict) and resolved.get("name"):
                self._campaign[host] = str(resolved["name"])
            plan = facts.get("sparkfleet_plan")
            if isinstance(plan, dict):  # a host's plan from campaign_plan: its runs, async limit, ...
                plan = plan.get("runs")
            if isinstance(plan, list):
                self._planned(host, plan)
        event = result.get("sparkfleet_event")
        if isinstance(event, dict):
            self._event(host, event)
        events = result.get("sparkfleet_events")
        if isinstance(events, list):
            progress = self._host(host)
            for event in events:
                if not isinstance(event, dict):
                    continue
                key = (str(event.get("run_id")), str(event.get("finished_ts")))
                if key in progress.seen:
                    continue
                progress.seen.add(key)
                self._event(host, event)

    def _planned(self, host, plan):
        progress = self._host(host)
        entries = [p for p in plan if isinstance(p, dict)]
        progress.plan = sorted(entries, key=lambda p: (p.get("order_index") is None, p.get("order_index") or 0))
        progress.total = len(plan)
        fields = {"host": host, "total": progress.total, "next_cell": progress.next_cell()}
        campaign = next((p["campaign"] for p in entries if p.get("campaign")), None) or self._campaign.get(host)
        if campaign:
            fields["campaign"] = campaign
        self._emit("planned", **fields)

    def _event(self, host, event):
        progress = self._host(host)
        fields = dict(event)
        kind = str(fields.get("type") or "run")
        fields.update(host=host, cell=_cell(fields))
        if kind == "run":
            run_id = fields.get("run_id")
            if run_id is None:
                progress.done_anon += 1
            else:
                progress.done_ids.add(run_id)
            if progress.total is None and isinstance(fields.get("total"), int) and fields["total"] > 0:
                progress.total = fields["total"]  # no plan seen: trust the event's own total
            if fields.get("status") != "skipped" and fields.get("duration_s") is not None:
                with contextlib.suppress(TypeError, ValueError):
                    progress.spent.append(float(fields["duration_s"]) + float(fields.get("cooldown_s") or 0))
            fields.update(done=progress.done, total=progress.total, eta_s=progress.eta(),
                          next_cell=progress.next_cell())
        fields.pop("event", None)
        fields.pop("ts", None)
        self._emit(kind, **fields)

    @staticmethod
    def _hostname(result):
        return result._host.get_name()

    # ---- callbacks ----------------------------------------------------------------------------
    def v2_playbook_on_start(self, playbook):
        self._emit("playbook_start", playbook=os.path.basename(getattr(playbook, "_file_name", "") or ""))

    def v2_playbook_on_play_start(self, play):
        self._emit("play_start", name=play.get_name().strip())

    def v2_runner_on_ok(self, result):
        self._inspect(self._hostname(result), result._result)

    def v2_runner_retry(self, result):  # bench_follow under until: progress while the matrix runs
        self._inspect(self._hostname(result), result._result)

    def v2_runner_item_on_ok(self, result):
        self._inspect(self._hostname(result), result._result)

    def v2_runner_item_on_failed(self, result):
        self._inspect(self._hostname(result), result._result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        host = self._hostname(result)
        self._inspect(host, result._result)
        if not ignore_errors:
            self._emit("host_failed", host=host, task=result._task.get_name().strip(),
                       msg=_message(result._result, "failed"))

    def v2_runner_on_unreachable(self, result):
        self._emit("host_unreachable", host=self._hostname(result), task=result._task.get_name().strip(),
                   msg=_message(result._result, "unreachable"))

    def v2_playbook_on_stats(self, stats):
        hosts = {}
        for host in sorted(stats.processed.keys()):
            s = stats.summarize(host)
            hosts[host] = {"ok": s["ok"], "changed": s["changed"], "failed": s["failures"],
                           "unreachable": s["unreachable"], "skipped": s["skipped"],
                           "rescued": s["rescued"], "ignored": s["ignored"]}
        self._emit("stats", hosts=hosts)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
