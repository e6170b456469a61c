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
description:
  - Watches a M(bench_run) job started with C(async) and C(poll: 0). Each poll is one shell command over
    the existing SSH connection (C(cat) of the async job file and the host's ledger, C(test -d /proc/PID)
    for the registered jobs); nothing is copied and no Python starts on the host.
  - Returns when a run finishes (so the task's C(until) loop hands progress to callbacks one finished run
    at a time), after O(report_after_s) without one, or when the job ends. Use with
    C(until: result.finished), a large C(retries) and C(delay: 0).
  - When the job ends its result is returned as this task's (C(runs), C(counts), C(sparkfleet_events)),
    failed if the job failed, and the async job file is removed.
  - "If the job file says the job still runs but no registered bench_run process has lived for
    O(lost_after_s) (the host rebooted, the job was killed), the task fails saying so; the ledger keeps
    what was finished and a new bench_run resumes."
  - An unreachable host makes the task unreachable, as for any task; the job itself goes on.
options:
  job:
    description: The registered result of the async bench_run task (needs C(results_file)).
    type: dict
    required: true
  ledger:
    description: Path of the host's ledger (C(<results_root>/<campaign>/<host>/ledger.jsonl)).
    type: path
    required: true
  jobs_dir:
    description: The host's job registry (C(<results_root>/.sparkfleet/jobs)).
    type: path
    required: true
  total:
    description: Runs planned on the host, copied into the progress events.
    type: int
  poll_interval_s:
    description: Seconds between polls.
    type: float
    default: 2
  report_after_s:
    description: Return (not finished) after this many seconds without a newly finished run.
    type: float
    default: 60
  lost_after_s:
    description: Fail after this many seconds with an unfinished job file and no live registered job.
    type: float
    default: 15
author: sparkfleet
"""

EXAMPLES = r"""
- name: Follow the matrix job until it ends
  bench_follow:
    job: "{{ matrix_job }}"
    ledger: "/var/lib/sparkfleet/results/{{ campaign }}/{{ inventory_hostname }}/ledger.jsonl"
    jobs_dir: /var/lib/sparkfleet/results/.sparkfleet/jobs
    total: "{{ sparkfleet_plan | length }}"
  register: matrix_follow
  until: matrix_follow.finished
  retries: 100000
  delay: 0
"""

RETURN = r"""
finished:
  description: Whether the job has ended (with its result merged in) or is known lost.
  returned: always
  type: bool
sparkfleet_events:
  description: One progress event per finished run (run_id, status - skipped for runs an earlier job did -, duration_s, cooldown_s, cell names, finished_ts).
  returned: always
  type: list
  elements: dict
done:
  description: Runs finished so far (while the job runs).
  returned: when not finished
  type: int
current:
  description: The run the job is in now, or null.
  returned: when not finished
  type: str
runs:
  description: The job's per-run results (see M(bench_run)).
  returned: when finished
  type: list
counts:
  description: The job's runs per status.
  returned: when finished
  type: dict
"""
