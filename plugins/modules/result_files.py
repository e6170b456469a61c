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
version_added: 0.1.0
description:
  - Creates O(dir) (and its parents) and writes each file of O(files) in it. Each file is written
    atomically (a temporary file in O(dir), then a rename), and only when its content or mode differs from
    what is there, so a second run reports no change.
  - One call replaces a C(file) task plus one C(copy) task per file. With many hosts on one controller each
    task costs seconds, and a C(copy) costs three round trips (stat, transfer, module); this costs one.
  - Every name and every content is checked before anything is written, so a bad entry leaves the directory
    as it was.
options:
  dir:
    description: The directory the files go into. Created with mode O(dir_mode) where it is missing.
    type: path
    required: true
  files:
    description:
      - File name to content. A name is a plain file name (no C(/), not C(.) or C(..), no NUL); content is
        text, written as UTF-8 exactly as given (add the final newline yourself).
      - A name that is a directory on the host is refused.
    type: dict
    required: true
  mode:
    description: Mode of the files written, as an octal string such as C("0644") or a number.
    type: raw
    default: "0644"
  dir_mode:
    description: Mode of the directories created (existing directories keep theirs).
    type: raw
    default: "0755"
attributes:
  check_mode:
    support: full
    description: Reports in RV(written) what would change and writes nothing.
  diff_mode:
    support: full
    description: One before/after diff per file that would change.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host with Python.
notes:
  - Meant for small files (records, snapshots, scripts); the content travels in the module's arguments.
seealso:
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
extends_documentation_fragment:
  - sparkfleet.bench.attributes
"""

EXAMPLES = r"""
- name: Write host.json and a snapshot beside it
  sparkfleet.bench.result_files:
    dir: /var/lib/sparkfleet/results/sanity/spark1
    files:
      host.json: "{{ host_record | to_nice_json }}\n"
      nvidia-smi-q.txt: "{{ smi.stdout }}\n"

- name: Install scripts, executable, in a private directory
  sparkfleet.bench.result_files:
    dir: /var/lib/sparkfleet/results/.sparkfleet/workloads
    files:
      matmul.py: "{{ lookup('ansible.builtin.file', 'matmul.py') }}"
    mode: "0755"
    dir_mode: "0700"
"""

RETURN = r"""
dir:
  description: The directory written to.
  returned: always
  type: str
  sample: /var/lib/sparkfleet/results/sanity/spark1
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
  sample: [nvidia-smi-q.txt]
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.textfile import write_atomic  # noqa: E402


def bad_name(name: str) -> bool:
    return not name or "/" in name or "\0" in name or name in (".", "..")


def current_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_atomically(path: str, data: bytes) -> None:
    """The one atomic writer; the file keeps the mode of the one it replaces (a new one gets 0666 less the
    umask), as a move over it would, before O(mode) is applied."""
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)  # a module is single-threaded: nothing else creates files meanwhile
        os.umask(umask)
        mode = 0o666 & ~umask
    write_atomic(path, data, mode=mode)


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

    in_the_way = sorted(os.path.join(directory, n) for n in files if os.path.isdir(os.path.join(directory, n)))
    if in_the_way:  # checked before any file is written
        module.fail_json(msg=f"result_files: {', '.join(in_the_way)}: is a directory", dir=directory)

    created = make_dir(module, directory, module.params["dir_mode"])
    written, unchanged, diffs = [], [], []
    for name in sorted(files):
        path = os.path.join(directory, name)
        data = files[name].encode("utf-8")
        before = current_bytes(path)
        content_changed = before != data
        if content_changed:
            diffs.append({"before_header": path, "after_header": path,
                          "before": (before or b"").decode("utf-8", "replace"), "after": files[name]})
            if not module.check_mode:
                write_atomically(path, data)
        mode_changed = (module.set_mode_if_different(path, module.params["mode"], False)
                        if os.path.exists(path) else False)
        (written if content_changed or mode_changed else unchanged).append(name)

    result = {"changed": created or bool(written), "dir": directory, "written": written, "unchanged": unchanged}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
