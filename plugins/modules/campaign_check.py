#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Documentation of the campaign_check action (plugins/action/campaign_check.py); the action runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: campaign_check
short_description: Check that a host can run a campaign, before anything on it is changed
version_added: 0.1.0
description:
  - The first of the validate stage's two steps; M(sparkfleet.bench.campaign_plan) is the second, and takes
    every host's result of this one.
  - On the controller, resolves the campaign (O(campaign), or the default for the host's groups) with every
    default and preset, and checks it field by field; checks the host's C(sparkfleet_*) inventory variables
    against the settings registry. Every problem is named, with its field or variable and host.
  - Then asks the host, in one read-only shell command (C(test -e), C(cat); no Python starts there), whether
    each model path of the campaign exists, and which campaign configuration it keeps beside earlier results
    of this campaign (and of the id the campaign would get as a changed one), so that the resume decision
    does not depend on the controller's copy alone.
  - Fails when the campaign, the host name (letters, digits, C(.), C(_), C(-) only) or a variable is bad, or a
    model path is missing; all of that is checked on the controller before the host is asked. Unknown
    C(sparkfleet_*) variables are warnings.
  - A host that cannot be reached is reported unreachable, its result still holding the controller's part of the
    check, so that M(sparkfleet.bench.campaign_plan) plans its runs and the rest of the fleet goes on.
  - This is an action plugin; it runs on the controller. This file holds its documentation only.
options:
  campaign:
    description:
      - The campaign, as a mapping (bare or under a C(sparkfleet_campaign) key), as C(sparkfleet validate)
        reads it.
      - When not given, the collection's default for the host's groups - the study's matrix for the C(sparks)
        group, the C(sanity) campaign otherwise (see the R(default_campaign filter,ansible_collections.sparkfleet.bench.default_campaign_filter)).
    type: raw
attributes:
  check_mode:
    support: full
    description: It changes nothing anywhere; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Needs C(sh), C(test), C(cat) and C(printf) on the host.
notes:
  - The host's C(sparkfleet_*) variables are read by the action itself (templated as any task would), so the
    task needs no argument for them.
seealso:
  - module: sparkfleet.bench.campaign_plan
  - module: sparkfleet.bench.bench_run
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Check that this host can run the campaign
  sparkfleet.bench.campaign_check:
    campaign: "{{ sparkfleet_campaign | default(omit) }}"
  register: validate_check

- name: Check a campaign of its own
  sparkfleet.bench.campaign_check:
    campaign:
      name: quick
      image: nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc4
      models: [matmul]
      environments: [native, container]
      workloads: [matmul]
      iterations: 3
  register: validate_check
"""

RETURN = r"""
host:
  description: The host checked.
  returned: success
  type: str
  sample: spark1
campaign:
  description: The resolved campaign (every default and preset filled in) with its C(config_hash).
  returned: success
  type: dict
  sample: {name: sanity, config_hash: 3f2a9c1e0b4d5e6f, iterations: 3, order: interleaved}
settings:
  description: The host's settings a plan depends on (docker flags and variants, work dir, report interval),
    with their defaults.
  returned: success
  type: dict
  sample: {sparkfleet_work_dir: /var/lib/sparkfleet, sparkfleet_docker_variant: study}
kept:
  description:
    - Campaign id -> the configuration the host keeps beside its results of that campaign
      (C(<work_dir>/results/<id>/<host>/campaign-config.json)), or null when it keeps none.
  returned: success
  type: dict
  sample: {sanity: null, sanity-3f2a9c1e: null}
missing_model_paths:
  description: The campaign's model paths that do not exist on the host.
  returned: always
  type: list
  elements: str
  sample: []
warnings:
  description: The C(sparkfleet_*) variables that are not sparkfleet settings, each with its host.
  returned: when there are any
  type: list
  elements: str
  sample: ["spark1: sparkfleet_telemetry_intervall_s: not a sparkfleet setting (a typo?); ignored"]
"""
