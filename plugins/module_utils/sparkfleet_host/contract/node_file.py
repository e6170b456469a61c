# Copyright: sparkfleet contributors
# Apache-2.0
"""The node file of a multi-node run (issue 36): what a worker node of a run led by rank 0 writes in its own results
tree, ``<results_root>/<campaign>/<worker host>/cluster_nodes/<run_id>/node.json`` with ``telemetry.csv`` beside it
(the run's telemetry.csv columns, sensors/telemetry.py). ``run_id`` is rank 0's: the record the node belongs to.

One home for the layout (the worker that writes it and the report that reads it) and for the check of a file read
back: :func:`node_problem` says what makes a node.json unusable. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
from typing import Any, Optional

#: The directory of a host's node files, beside its ``runs`` directory.
NODES_DIR = "cluster_nodes"
NODE_NAME = "node.json"
NODE_SCHEMA = 1
#: Keys a node file must have, and the types they must be (readiness and telemetry may be null: not probed, none).
_REQUIRED = (("schema", int), ("run_id", str), ("host", str), ("rank", int))
_OPTIONAL_OBJECTS = ("readiness", "telemetry", "environment", "worker")


def node_dir(host_dir: str, run_id: str) -> str:
    """Where a worker writes its node file of run ``run_id``: ``<host_dir>/cluster_nodes/<run_id>``."""
    return os.path.join(host_dir, NODES_DIR, run_id)


def node_problem(data: Any) -> Optional[str]:
    """What makes ``data`` (a node.json read back) unusable, in words; None when it is a node file."""
    if not isinstance(data, dict):
        return "not a JSON object"
    schema = data.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > NODE_SCHEMA:
        return "schema %d is newer than this code's %d" % (schema, NODE_SCHEMA)
    for key, kind in _REQUIRED:
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return "no %s %s" % (key, "integer" if kind is int else "string")
    for key in _OPTIONAL_OBJECTS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            return "%s is not an object or null" % key
    return None
