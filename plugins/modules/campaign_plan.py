#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Documentation of the campaign_plan action (plugins/action/campaign_plan.py); the action runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: campaign_plan
short_description: Plan every host's runs once, decide a resume, and record the plan in campaign.json
version_added: 0.1.0
description:
  - The second of the validate stage's two steps. Reads the result each play host registered from
    M(sparkfleet.bench.campaign_check) (the variable named by O(checks)), and for the whole fleet at once
    - refuses hosts that were given different campaigns;
    - decides whether the campaign's earlier results may be resumed. A campaign whose configuration changed
      under the same name is refused, naming every changed field, when the controller's C(campaign.json) or
      any host's kept configuration differs; with O(on_change=new) it runs under the campaign id
      C(<name>-<first 8 of its config hash>) instead (refused in turn if that id holds yet another
      configuration). Runs of two configurations never share a cell;
    - plans each host's runs in execution order, each with its full launch spec (model, environment with a
      container's docker flags resolved from the host's settings, workload, timeout, cooldown), the C(async)
      limit of the host's job and how its follower polls;
    - writes C(<results_dir>/<campaign>/campaign.json) (resolved campaign, config hash, order seed, every
      host's planned run ids, the controller's versions), atomically, and only when its content changes.
  - Must run with C(run_once=true). Its registered result reaches every host of the play; hand each host its
    part with M(ansible.builtin.set_fact) (see the examples).
  - This is an action plugin; it runs on the controller. This file holds its documentation only.
options:
  checks:
    description: The name of the variable each play host registered its M(sparkfleet.bench.campaign_check)
      result in.
    type: str
    required: true
  results_dir:
    description:
      - The controller's results directory. When empty, the campaign's C(results_dir). A relative path is
        relative to the directory ansible-playbook runs in.
    type: path
  on_change:
    description: What to do when the campaign changed since its results were started - C(refuse), or C(new)
      (run it under a new campaign id).
    type: str
    default: refuse
    choices: [refuse, new]
  fresh:
    description:
      - A fresh measurement (C(sparkfleet run --fresh), C(-e sparkfleet_fresh=true)) - the controller's
        C(<results_dir>/<campaign>/) (C(campaign.json) and every host's collected results) is renamed
        C(<results_dir>/<campaign>.<UTC stamp>/), kept whole and reportable alone, before the new C(campaign.json)
        is written; the hosts move theirs in M(sparkfleet.bench.bench_run) (O(sparkfleet.bench.bench_run#module:fresh)).
        Not in check mode.
    type: bool
    default: false
  run_token:
    description:
      - This run's token, the name of its host lease (M(sparkfleet.bench.host_lease)). C(sparkfleet run) passes
        its own (C(-e sparkfleet_run_token=...)), which its Ctrl-C clean-up names; omitted, a new one is drawn.
    type: str
attributes:
  check_mode:
    support: full
    description: In check mode C(campaign.json) is not written (C(changed) says whether it would be), and each
      host's RV(hosts[].async_s) is 0, since Ansible runs a check-mode task in the foreground.
  diff_mode:
    support: none
    description: No diff is shown for C(campaign.json).
  platform:
    support: full
    platforms: posix
    description: Runs on the controller only.
seealso:
  - module: sparkfleet.bench.campaign_check
  - module: sparkfleet.bench.bench_run
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Check that this host can run the campaign
  sparkfleet.bench.campaign_check:
    campaign: "{{ sparkfleet_campaign | default(omit) }}"
  register: validate_check

- name: Plan the fleet's runs and record them in campaign.json
  sparkfleet.bench.campaign_plan:
    checks: validate_check
    results_dir: "{{ sparkfleet_results_dir }}"
    on_change: "{{ sparkfleet_campaign_on_change }}"
  register: validate_plan
  run_once: true

- name: Hand each host its part of the plan
  ansible.builtin.set_fact:
    sparkfleet_resolved_campaign: "{{ validate_plan.campaign }}"
    sparkfleet_plan: "{{ validate_plan.hosts[inventory_hostname] }}"
"""

RETURN = r"""
campaign:
  description: The campaign that runs (renamed when O(on_change=new) applied), resolved, with its C(config_hash).
  returned: success
  type: dict
  sample: {name: sanity, config_hash: 3f2a9c1e0b4d5e6f, iterations: 3, order: interleaved}
lease:
  description:
    - What each host's lease is taken with - the run's C(token) (O(run_token) or a new one) and the
      C(controller) that runs it (this machine's id, the ansible-playbook pid and its start time, the hostname).
  returned: success
  type: dict
  sample: {token: 3f2a9c0d5e6b4a1f8e7d6c5b4a392817, controller: {machine_id: 0f1e2d, pid: 4242, start_ticks: 81234,
           hostname: laptop}}
previous_instance:
  description: Where O(fresh) moved the controller's previous results of the campaign, else null.
  returned: success
  type: str
  sample: null
renamed_from:
  description: The campaign's own name when it runs under a new id, else null.
  returned: success
  type: str
  sample: null
results_dir:
  description: The controller's results directory, absolute.
  returned: success
  type: str
  sample: /home/me/sparkfleet/results
campaign_file:
  description: The path of C(campaign.json).
  returned: success
  type: str
  sample: /home/me/sparkfleet/results/sanity/campaign.json
unreachable_hosts:
  description: The hosts whose campaign check could not reach them; their runs are planned into C(campaign.json)
    all the same (the report names them missing), and the other hosts go on.
  returned: success
  type: list
  elements: str
  sample: [spark3]
hosts:
  description: Host -> its plan.
  returned: success
  type: dict
  contains:
    runs:
      description: The host's runs in execution order, each with C(run_id), C(order_index), C(model),
        C(environment), C(workload), C(iteration), C(warmup), C(timeout_s) and C(cooldown); what
        M(sparkfleet.bench.bench_run) takes as O(sparkfleet.bench.bench_run#module:runs).
      type: list
      elements: dict
    total:
      description: The number of runs.
      type: int
    async_s:
      description: The C(async) limit for the host's M(sparkfleet.bench.bench_run) job - twice each run's
        timeout and longest cooldown, plus slack; 0 in check mode.
      type: int
    follow:
      description: How the host's M(sparkfleet.bench.bench_follow) loop polls - C(poll_interval_s) and
        C(report_after_s) (the host's C(sparkfleet_poll_interval_s) and C(sparkfleet_report_after_s)), and the
        C(retries) it needs to follow the whole job.
      type: dict
    needs_native:
      description: Whether the campaign has a native environment (the native rootfs must be provisioned).
      type: bool
    needs_container:
      description: Whether the campaign has a container environment.
      type: bool
    summary:
      description: One line - campaign, config hash, number of runs, host and order.
      type: str
  sample:
    spark1: {total: 6, async_s: 46320, follow: {poll_interval_s: 2.0, report_after_s: 60.0, retries: 794}, needs_native: true, needs_container: true,
             summary: "campaign sanity (3f2a9c1e0b4d5e6f): 6 runs planned on spark1, order interleaved",
             runs: []}
"""
