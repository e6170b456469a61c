#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Take or give back the host lease: one sparkfleet run at a time on a host, whatever its campaign."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lease
short_description: One sparkfleet run at a time on a host
version_added: 0.1.0
description:
  - A run takes the lease (C(<results_root>/.sparkfleet/host.lease)) before it changes anything on the host
    (mounts, GPU state, a matrix job) and gives it back once it has undone them. A run that finds the lease held
    by another run that is still alive fails here, before it changes anything, naming the holder and the
    command that ends it; so one campaign's clean-up never touches another's mounts, containers or archives.
  - The holder is alive while its controller runs (a controller on this machine is checked by pid and start
    time), or, for a controller on another machine, while a matrix job runs or the lease is younger than
    O(ttl_s). A lease whose holder is gone is taken over (RV(taken_over)).
  - Taking the lease again with the same O(token) renews it.
options:
  results_root:
    description: The host's results root (C(sparkfleet_results_root)); the lease lives under it.
    type: path
    required: true
  state:
    description: C(acquired) takes or renews the lease; C(released) gives it back.
    type: str
    choices: [acquired, released]
    default: acquired
  token:
    description:
      - The run's token (one per C(ansible-playbook) run, from the campaign plan).
      - With O(state=released), omitted means whoever holds the lease (C(playbooks/restore.yml) with no run
        named); given, another run's lease is left alone.
    type: str
  host:
    description: The host's inventory name, named in a refusal (C(-l HOST) of the command that ends the holder).
    type: str
    required: true
  campaign:
    description: The run's campaign, recorded in the lease and named to a run that is refused.
    type: str
  controller:
    description: Who runs the controller (machine_id, pid, start_ticks, hostname), from the campaign plan.
    type: dict
    default: {}
  ttl_s:
    description: Seconds a lease of a controller on another machine stays alive with no matrix job running.
    type: float
    default: 7200
attributes:
  check_mode:
    support: full
    description: Reports whether the lease is free (or would be refused) and writes nothing.
  diff_mode:
    support: none
    description: Not supported.
  platform:
    support: full
    platforms: posix
    description: Reads C(/proc) and takes an flock, so Linux hosts only.
seealso:
  - module: sparkfleet.bench.bench_stop
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Take this host for the run (refused while another run holds it)
  sparkfleet.bench.host_lease:
    results_root: /var/lib/sparkfleet/results
    host: spark1
    token: 3f2a9c0d5e6b4a1f
    campaign: sanity

- name: Give it back
  sparkfleet.bench.host_lease:
    results_root: /var/lib/sparkfleet/results
    host: spark1
    token: 3f2a9c0d5e6b4a1f
    state: released
"""

RETURN = r"""
taken_over:
  description: The lease of a run that was gone (its token, campaign, when it was taken), taken over; else null.
  returned: state=acquired
  type: dict
holder:
  description: Who held the lease when it was released, or who holds it still (another run's lease is kept).
  returned: state=released
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import lease


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_root=dict(type="path", required=True),
            host=dict(type="str", required=True),
            state=dict(type="str", choices=["acquired", "released"], default="acquired"),
            token=dict(type="str", no_log=False),  # a run's name, not a secret
            campaign=dict(type="str"),
            controller=dict(type="dict", default={}),
            ttl_s=dict(type="float", default=lease.DEFAULT_TTL_S),
        ),
        required_if=[("state", "acquired", ("token", "campaign"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "released":
            module.exit_json(**lease.release(p["results_root"], p["token"], check_mode=module.check_mode))
        module.exit_json(**lease.acquire(p["results_root"], p["host"], p["token"],
                                         p["campaign"], p["controller"], p["ttl_s"], check_mode=module.check_mode))
    except lease.HostBusy as exc:
        module.fail_json(msg=str(exc), busy=True)
    except OSError as exc:
        module.fail_json(msg="host lease under %s: %s" % (p["results_root"], exc))


if __name__ == "__main__":
    main()
