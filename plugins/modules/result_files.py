#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Write a host's small result files (JSON records, snapshots, scripts) in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: result_files
short_description: Write several small files into one directory in a single call
description:
  - Creates O(dir) (and its parents) and writes each file of O(files) in it, each atomically (a temporary
    file in O(dir), then a rename), and only when its content differs from what is there.
  - One call replaces a C(file) task plus one C(copy) task per file. With many hosts on one controller
    each task costs seconds, and a C(copy) costs three round trips (stat, transfer, module); this costs one.
  - Supports check mode and diff mode (one diff per file that would change).
options:
  dir:
    description: The directory the files go into. Created with mode O(dir_mode) where it is missing.
    type: path
    required: true
  files:
    description:
      - File name to content. A name is a plain file name (no C(/), not C(.) or C(..)); content is text,
        written as UTF-8 exactly as given.
    type: dict
    required: true
  mode:
    description: Mode of the files written.
    type: raw
    default: "0644"
  dir_mode:
    description: Mode of the directories created.
    type: raw
    default: "0755"
author: sparkfleet
"""

EXAMPLES = r"""
- name: Write host.json
  result_files:
    dir: /var/lib/sparkfleet/results/sanity/spark1
    files:
      host.json: "{{ record | to_nice_json }}\n"
"""

RETURN = r"""
dir:
  description: The directory written to.
  returned: always
  type: str
written:
  description: Names of the files whose content or mode was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: [host.json]
unchanged:
  description: Names of the files already as asked.
  returned: always
  type: list
  elements: str
"""

import os  # noqa: E402
import tempfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def bad_name(name: str) -> bool:
    return not name or "/" in name or "\0" in name or name in (".", "..")


def current_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_atomically(module: AnsibleModule, path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".result_files.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def make_dir(module: AnsibleModule, path: str, mode) -> bool:
    """Create ``path`` and its missing parents with ``mode``; True if anything was created."""
    if os.path.isdir(path):
        return False
    if os.path.exists(path):
        module.fail_json(msg=f"result_files: {path} exists and is not a directory", dir=path)
    if module.check_mode:
        return True
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path:
        make_dir(module, parent, mode)
    os.mkdir(path)
    module.set_mode_if_different(path, mode, False)
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            mode=dict(type="raw", default="0644"),
            dir_mode=dict(type="raw", default="0755"),
        ),
        supports_check_mode=True,
    )
    directory = os.path.abspath(module.params["dir"])
    files = module.params["files"]
    bad = sorted(str(n) for n in files if bad_name(str(n)))
    if bad:
        module.fail_json(msg=f"result_files: not plain file names: {', '.join(bad)}", dir=directory)
    not_text = sorted(str(n) for n, c in files.items() if not isinstance(c, str))
    if not_text:
        module.fail_json(msg=f"result_files: content must be text for: {', '.join(not_text)} "
                             "(render records with to_nice_json)", dir=directory)

    created = make_dir(module, directory, module.params["dir_mode"])
    written, unchanged, diffs = [], [], []
    for name in sorted(files):
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            module.fail_json(msg=f"result_files: {path} is a directory", dir=directory)
        data = files[name].encode("utf-8")
        before = current_bytes(path)
        content_changed = before != data
        if content_changed:
            diffs.append({"before_header": path, "after_header": path,
                          "before": (before or b"").decode("utf-8", "replace"), "after": files[name]})
            if not module.check_mode:
                write_atomically(module, path, data)
        mode_changed = (module.set_mode_if_different(path, module.params["mode"], False)
                        if os.path.exists(path) else False)
        (written if content_changed or mode_changed else unchanged).append(name)

    result = {"changed": created or bool(written), "dir": directory, "written": written, "unchanged": unchanged}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
