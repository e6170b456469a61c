#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Documentation of the results_unpack action (plugins/action/results_unpack.py); the action runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: results_unpack
short_description: Merge a host's fetched results archive into the controller's results tree
version_added: 0.1.0
description:
  - The collect stage's last step. Merges O(archive), a tar (optionally compressed) of C(<host>/...) as the
    collect role packs a host's results, into C(<campaign_dir>/<host>/) on the controller.
  - A fetched tree comes from a machine not fully trusted. Every member is checked before anything is written;
    absolute paths, C(..), links, device files and FIFOs, members outside C(<host>/) and members named like a
    staging directory are refused, so nothing can land outside C(<campaign_dir>/<host>/).
  - Atomic per run. The archive is written into a staging directory C(<host>/.sparkfleet-staging-<pid>-*)
    first; each run directory then moves into place as one unit (a rename; an existing copy is swapped out in
    one step), and each host-level file with one rename. A controller killed meanwhile leaves every run whole,
    old or new; the report never reads a staging directory, and the next unpack of that host removes it.
  - Never older over newer. A run directory already collected is replaced only by a copy of that run that is
    not older (its record's C(ended_utc); without records, the files' modification times); files the archive
    does not have are kept. A host-level file is replaced only by a copy that is not older (C(ledger.jsonl),
    append-only, only by one that is not shorter).
  - This is an action plugin; it runs on the controller. This file holds its documentation only.
options:
  archive:
    description: The fetched archive, on the controller. It is removed once unpacked (kept when the unpack fails).
    type: path
    required: true
  campaign_dir:
    description: The campaign's directory on the controller (C(<results_dir>/<campaign>)); the host's results
      go into its subdirectory named O(host).
    type: path
    required: true
  host:
    description: The host directory the archive holds and that is written; defaults to C(inventory_hostname).
    type: str
attributes:
  check_mode:
    support: full
    description: In check mode nothing is unpacked.
  diff_mode:
    support: none
    description: No diff is shown.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller only.
seealso:
  - module: ansible.builtin.fetch
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Fetch the archive to the controller
  ansible.builtin.fetch:
    src: /var/lib/sparkfleet/.collect-sanity.tgz
    dest: results/sanity/.incoming/{{ inventory_hostname }}.tgz
    flat: true

- name: Unpack it under results/sanity/<host>/
  sparkfleet.bench.results_unpack:
    archive: results/sanity/.incoming/{{ inventory_hostname }}.tgz
    campaign_dir: results/sanity
"""

RETURN = r"""
files:
  description: The number of files written (0 when everything collected was already as new).
  returned: always
  type: int
  sample: 42
dest:
  description: The host's results directory on the controller.
  returned: always
  type: str
  sample: results/sanity/spark1
"""
