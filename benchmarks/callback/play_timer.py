"""Benchmark-only callback: wall time of each play and task, written as JSON to $SPARKFLEET_PLAY_TIMES."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: play_timer
type: aggregate
short_description: Wall time per play and per task (benchmarks only)
description: Writes a JSON list of plays (name, seconds, tasks with seconds) to the file named by SPARKFLEET_PLAY_TIMES.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "play_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._plays: list[dict] = []
        self._mark = None

    def _close(self, now: float) -> None:
        if self._plays:
            play = self._plays[-1]
            if play["tasks"] and "s" not in play["tasks"][-1]:
                play["tasks"][-1]["s"] = round(now - play["tasks"][-1].pop("t0"), 3)
            play.setdefault("s", round(now - play.pop("t0"), 3))

    def v2_playbook_on_play_start(self, play):
        now = time.monotonic()
        self._close(now)
        self._plays.append({"play": play.get_name(), "t0": now, "tasks": []})

    def _task(self, name: str) -> None:
        now = time.monotonic()
        tasks = self._plays[-1]["tasks"]
        if tasks and "s" not in tasks[-1]:
            tasks[-1]["s"] = round(now - tasks[-1].pop("t0"), 3)
        tasks.append({"task": name, "t0": now})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task(task.get_name())

    def v2_playbook_on_handler_task_start(self, task):
        self._task(task.get_name())

    def v2_playbook_on_stats(self, stats):
        self._close(time.monotonic())
        path = os.environ.get("SPARKFLEET_PLAY_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(self._plays, fh, indent=1)
