# Copyright: sparkfleet contributors
# Apache-2.0
"""Merge a host's fetched results archive into the controller's results tree (collect's last step)."""

from __future__ import annotations

import contextlib
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import checked_args
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.unpack import UnpackError, unpack_host_archive

#: The options documented in plugins/modules/results_unpack.py (a test checks that the two agree).
ARGUMENT_SPEC = {
    "archive": {"type": "path", "required": True},
    "campaign_dir": {"type": "path", "required": True},
    "host": {"type": "str"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = checked_args(ARGUMENT_SPEC, self._task.args)
        host = args["host"] or str((task_vars or {}).get("inventory_hostname") or "")
        dest = f"{args['campaign_dir'].rstrip('/')}/{host}"
        if self._task.check_mode:
            result.update(changed=False, files=0, dest=dest, msg="check mode: nothing unpacked")
            return result
        try:
            written = unpack_host_archive(args["archive"], args["campaign_dir"], host)
        except UnpackError as exc:
            raise AnsibleActionFail(str(exc)) from None
        except OSError as exc:  # the controller's disk filled, a file appeared where a directory goes
            where = f" ({exc.filename})" if exc.filename else ""
            raise AnsibleActionFail(f"{dest}: cannot unpack {args['archive']}: {exc.strerror or exc}{where}") from None
        # Unpacked: the fetched copy goes (each run fetches one of its own name; left, they would pile up).
        with contextlib.suppress(OSError):
            os.unlink(args["archive"])
        result.update(changed=written > 0, files=written, dest=dest, msg=f"{host}: {written} files into {dest}")
        return result
