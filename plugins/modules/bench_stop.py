#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Stop the matrix jobs (bench_run) still running on a host, before its mounts and GPU state are undone."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_stop
short_description: Stop sparkfleet matrix jobs still running on a host
description:
  - A matrix job (M(bench_run) under C(async)) goes on when the controller that started it dies. Before the
    native rootfs is unmounted and the GPU state restored (C(restore.yml), the matrix's C(always)), the jobs
    registered under C(<results_root>/.sparkfleet/jobs/) are ended.
  - "Each job gets SIGTERM: it ends its workload (process group and container) and exits, leaving the run it
    was in unfinished in the ledger, so a resume runs it again; finished runs are kept. A job still there
    after O(grace_s) gets SIGKILL, and its workload is ended here. Registry entries of jobs no longer running
    are removed (their workload is ended if it still runs)."
  - A pid is only signalled if it is still the process that registered (same start time).
options:
  results_root:
    description: The results root the jobs registered under.
    type: path
    required: true
  campaign:
    description: Only stop jobs of this campaign (default all).
    type: str
  grace_s:
    description: Seconds a job has to end after SIGTERM.
    type: float
    default: 60
author: sparkfleet
"""

EXAMPLES = r"""
- name: Stop matrix jobs a killed controller left running
  bench_stop:
    results_root: /var/lib/sparkfleet/results
"""

RETURN = r"""
stopped:
  description: One entry per job ended (pid, campaign, run_id it was in, how - terminated, killed or gone).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.jobs import list_jobs, stop_job  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_root=dict(type="path", required=True),
            campaign=dict(type="str"),
            grace_s=dict(type="float", default=60),
        ),
        supports_check_mode=True,
    )
    jobs = [j for j in list_jobs(module.params["results_root"])
            if not module.params["campaign"] or j.get("campaign") == module.params["campaign"]]
    if module.check_mode:
        module.exit_json(changed=bool(jobs), stopped=[{"pid": j["pid"], "campaign": j.get("campaign"),
                                                       "run_id": j.get("run_id"), "how": "would stop"} for j in jobs])
    stopped = [stop_job(j, module.params["grace_s"]) for j in jobs]
    module.exit_json(changed=any(s["how"] != "gone" for s in stopped), stopped=stopped)


if __name__ == "__main__":
    main()
