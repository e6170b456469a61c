#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Documentation of the bench_follow action (plugins/action/bench_follow.py); the action runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_follow
short_description: Follow a host's background matrix job until a run finishes or the job ends
version_added: 0.1.0
description:
  - Watches a M(sparkfleet.bench.bench_run) job that was started with C(async) and C(poll=0), from the
    controller. Each poll is one shell command over the existing SSH connection (C(cat) of the async job
    file and of the host's ledger, C(test -d /proc/PID) for the registered jobs); nothing is copied and no
    Python starts on the host, so following costs the host almost nothing while it measures.
  - Returns when a run finishes, so that the task's C(until) loop hands progress on one finished run at a time
    (each result lists every run finished so far in RV(sparkfleet_events); C(sparkfleet run) reads them from
    ansible-runner's events and shows the new ones); after O(report_after_s) without a finished run; or when the job ends. Use it with
    C(until=result.finished), a large C(retries) and C(delay=0) (the action waits between polls itself).
  - A serving run writes a C(point) event to the ledger as each point of its profile starts and finishes; each
    result lists those of the current run and of the run finished before it in RV(sparkfleet_points), from
    which C(sparkfleet run) shows point k of n and an ETA within the run. A point does not make the task
    return early; it shows at the next return (within O(report_after_s)).
  - When the job ends, its result becomes this task's result (RV(runs), RV(counts), RV(summary),
    RV(sparkfleet_events)); the task fails if the job failed, and the async job file is removed, as
    C(async_status) cleanup would.
  - Given the result of a M(sparkfleet.bench.bench_run) task that ran in the foreground (in check mode, where
    Ansible runs no task with C(async)), returns that result as it is, finished.
  - If the job file says the job still runs but no registered bench_run process has lived for
    O(lost_after_s) (the host rebooted, the job was killed), the task fails saying so. The ledger keeps what
    was finished; running the playbook again resumes the campaign.
  - "Under plain C(ansible-playbook), prints one line per finished run: host, count, status and duration, such as C(spark1: run 3/6 ok in 10.6 s), then the cell and iteration in parentheses; each once over the C(until) retries (an attempt reads from the
    previous attempt's registered result how many it printed, so the task needs C(register))."
  - "Likewise one line per finished point of a serving run, such as C(spark1: point 3/28 ok in 312.4 s (d0.c4.pp512.tg64))."
  - An unreachable host makes the task unreachable, as for any task; the job itself goes on.
  - This is an action plugin; it runs on the controller. This file holds its documentation only.
options:
  job:
    description:
      - The registered result of the C(async) M(sparkfleet.bench.bench_run) task. It must have C(results_file)
        (the async job file), which an C(async) task with C(poll=0) returns.
    type: dict
    required: true
  ledger:
    description:
      - Path on the host of the host's ledger, C(<results_root>/<campaign>/<host>/ledger.jsonl).
      - The ledger may not exist yet when the job has not started its first run.
    type: str
    required: true
  jobs_dir:
    description:
      - The host's job registry, C(<results_root>/.sparkfleet/jobs), where each bench_run job registers its
        pid. Used to tell a running job from a lost one.
    type: str
    required: true
  total:
    description:
      - Runs planned on the host. Copied into the progress events and the printed lines (C(run 3/6)).
      - When not given, the lines show C(?) for the total.
    type: int
  poll_interval_s:
    description: Seconds between two polls of the host. Must be above 0.
    type: float
    default: 2.0
  report_after_s:
    description:
      - Return (with RV(finished=false)) after this many seconds without a newly finished run, so that a long
        run still shows signs of life. Must be above 0.
    type: float
    default: 60.0
  lost_after_s:
    description:
      - Fail after this many seconds in which the job file says the job runs but no registered job process
        lives. Must be above 0.
    type: float
    default: 15.0
attributes:
  check_mode:
    support: full
    description: In check mode the bench_run task ran in the foreground and only planned; its result is
      returned as it is.
  diff_mode:
    support: none
    description: Nothing is changed on the host, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Needs C(sh), C(cat), C(printf) and C(test) on the host.
notes:
  - The per-worker memory of which runs were already printed lives in the controller process; if a worker
    restarts, some lines may be printed again. Results are not affected.
seealso:
  - module: sparkfleet.bench.bench_run
  - module: sparkfleet.bench.bench_stop
  - module: ansible.builtin.async_status
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Start the host's matrix in the background (one call for the whole plan)
  sparkfleet.bench.bench_run:
    runs: "{{ sparkfleet_plan.runs }}"
    campaign: "{{ sparkfleet_resolved_campaign.name }}"
    host: "{{ inventory_hostname }}"
    results_root: /var/lib/sparkfleet/results
  async: "{{ sparkfleet_plan.async_s }}"
  poll: 0
  register: matrix_job

- name: Follow the matrix job until it ends, one line per finished run
  sparkfleet.bench.bench_follow:
    job: "{{ matrix_job }}"
    ledger: "/var/lib/sparkfleet/results/{{ sparkfleet_resolved_campaign.name }}/{{ inventory_hostname }}/ledger.jsonl"
    jobs_dir: /var/lib/sparkfleet/results/.sparkfleet/jobs
    total: "{{ sparkfleet_plan.total }}"
    poll_interval_s: "{{ sparkfleet_plan.follow.poll_interval_s }}"
    report_after_s: "{{ sparkfleet_plan.follow.report_after_s }}"
  register: matrix_follow
  until: matrix_follow.finished
  retries: "{{ sparkfleet_plan.follow.retries }}"
  delay: 0

- name: Show how the runs went
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }}: {{ matrix_follow.summary }}"
"""

RETURN = r"""
finished:
  description: Whether the job has ended (its result is merged into this one) or is known to be lost.
  returned: always
  type: bool
  sample: false
sparkfleet_events:
  description:
    - One progress event per finished run, in the order they finished. Runs an earlier job had already
      finished have C(status=skipped) and their earlier status in C(previous_status).
  returned: always
  type: list
  elements: dict
  sample:
    - {type: run, run_id: sanity-spark1-matmul-native-matmul-1-4f2a, order_index: 1, total: 6, status: ok,
       duration_s: 12.5, cooldown_s: 3.0, model: matmul, environment: native, workload: matmul, iteration: 1,
       warmup: false, finished_ts: "2026-11-21T10:00:12Z"}
sparkfleet_points:
  description:
    - The ledger's C(point) events of the current run and of the run finished before it (only their latest
      attempt), in ledger order; empty without a serving run. Each has C(run_id), C(k) and C(n) (point k of
      n, in the run's order), C(point) (its name), C(phase) (C(started) or C(finished); a finished one has
      C(status) and C(duration_s)), C(ts) (the host's time) and C(run_started_ts) (when the run started).
  returned: unless the bench_run task ran in the foreground
  type: list
  elements: dict
  sample:
    - {event: point, run_id: serve-spark1-qwen-container-arena-1-3b0d, k: 3, n: 28, point: d0.c4.pp512.tg64,
       phase: finished, status: ok, duration_s: 312.4, ts: "2026-11-21T10:42:02.120384Z",
       run_started_ts: "2026-11-21T10:20:11.004210Z"}
done:
  description: Number of runs finished so far.
  returned: when not finished, and when the job is lost
  type: int
  sample: 3
total:
  description: The O(total) given.
  returned: when not finished
  type: int
  sample: 6
current:
  description: The run the job is in now, or null between runs.
  returned: when not finished
  type: str
  sample: sanity-spark1-matmul-container-matmul-2-9c1e
runs:
  description: The job's per-run results, as M(sparkfleet.bench.bench_run) returns them.
  returned: when the job finished
  type: list
  elements: dict
counts:
  description: The job's number of runs per status.
  returned: when the job finished
  type: dict
  sample: {ok: 5, failed: 1}
summary:
  description: The job's one-line summary, as M(sparkfleet.bench.bench_run) returns it.
  returned: when the job finished
  type: str
  sample: "6 runs \u2014 ok 5, failed 1"
msg:
  description: Why the task failed (the job's own message, or that the job is lost).
  returned: when failed
  type: str
  sample: the matrix job is gone; run bench.yml again to resume
"""
