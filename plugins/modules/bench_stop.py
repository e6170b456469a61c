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
version_added: 0.1.0
description:
  - A matrix job (M(sparkfleet.bench.bench_run) under C(async)) goes on when the controller that started it
    dies. Before the native rootfs is unmounted and the GPU state restored (C(playbooks/restore.yml), the
    matrix play's C(always) section), the jobs registered under C(<results_root>/.sparkfleet/jobs/) are ended.
  - Each job gets SIGTERM. It ends its workload (the process group and the container) and exits, leaving the
    run it was in unfinished in the ledger, so a resume runs that run again; finished runs are kept.
  - A job still there after O(grace_s) gets SIGKILL, and its workload is ended here.
  - Registry entries of jobs that no longer run are removed (their workload is ended if it still runs).
  - Run containers left behind are removed (O(docker)).
  - A pid is signalled only while it is still the process that registered (same start time), so a recycled
    pid is never hit.
options:
  results_root:
    description: The results root the jobs registered under (the one given to M(sparkfleet.bench.bench_run)).
    type: path
    required: true
  campaign:
    description: Stop only the jobs of this campaign. By default every registered job is stopped.
    type: str
  grace_s:
    description: Seconds a job has to end after SIGTERM before it gets SIGKILL.
    type: float
    default: 60
  docker:
    description:
      - Docker CLI. Once the jobs are ended, the run containers left behind (labelled C(sparkfleet.run_id) and
        with O(results_root), of O(campaign) when given - a job could not remove them, Docker being down or the job killed) are removed.
        Where Docker cannot be asked, RV(containers_error) says why and the module does not fail.
    type: str
    default: docker
attributes:
  check_mode:
    support: full
    description: Lists the jobs it would stop (RV(stopped) with C(how=would stop)) and signals none.
  diff_mode:
    support: none
    description: Not supported.
  platform:
    support: full
    platforms: posix
    description: Reads C(/proc) to check a pid's start time, so Linux hosts only.
notes:
  - Returns C(changed=true) when at least one job was running (it was terminated or killed).
seealso:
  - module: sparkfleet.bench.bench_run
  - module: sparkfleet.bench.bench_follow
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Stop matrix jobs a killed controller left running
  sparkfleet.bench.bench_stop:
    results_root: /var/lib/sparkfleet/results

- name: Stop one campaign's job, giving it 10 s to end its workload
  sparkfleet.bench.bench_stop:
    results_root: /var/lib/sparkfleet/results
    campaign: sanity
    grace_s: 10
  register: stopped

- name: See what would be stopped, without stopping it
  sparkfleet.bench.bench_stop:
    results_root: /var/lib/sparkfleet/results
  check_mode: true
"""

RETURN = r"""
stopped:
  description:
    - One entry per job that was registered, with its C(pid), C(campaign), the C(run_id) it was in, and
      C(how) it ended - C(terminated) (ended after SIGTERM), C(killed) (needed SIGKILL), C(gone) (was no
      longer running) or, in check mode, C(would stop).
  returned: always
  type: list
  elements: dict
  sample:
    - {pid: 41234, campaign: sanity, run_id: sanity-spark1-matmul-native-matmul-2-9c1e, how: terminated}
containers_removed:
  description: Names of the run containers left behind that were removed (in check mode, that would be).
  returned: always
  type: list
  elements: str
containers_error:
  description: Why Docker could not be asked for left containers (no CLI, daemon down), else null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.jobs import (  # noqa: E402
    list_jobs,
    remove_left_containers,
    stop_job,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_root=dict(type="path", required=True),
            campaign=dict(type="str"),
            grace_s=dict(type="float", default=60),
            docker=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    jobs = [j for j in list_jobs(module.params["results_root"])
            if not module.params["campaign"] or j.get("campaign") == module.params["campaign"]]
    if module.check_mode:
        module.exit_json(changed=bool(jobs), stopped=[{"pid": j["pid"], "campaign": j.get("campaign"),
                                                       "run_id": j.get("run_id"), "how": "would stop"} for j in jobs],
                         containers_removed=[], containers_error=None)
    stopped = [stop_job(j, module.params["grace_s"]) for j in jobs]
    left = remove_left_containers(module.params["docker"], module.params["results_root"], module.params["campaign"])
    module.exit_json(changed=any(s["how"] != "gone" for s in stopped) or bool(left["removed"]), stopped=stopped,
                     containers_removed=left["removed"], containers_error=left["error"])


if __name__ == "__main__":
    main()
