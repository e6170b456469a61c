# Copyright: sparkfleet contributors
# Apache-2.0
"""What a module's work asks of AnsibleModule, as plain callables and values, so that the work lives in the host
code and a test drives it without AnsibleModule.

A module is its argument spec, its documentation and one call, ``task.exit_with(module, work)``: it runs
``work(module.params, task.of(module))`` and hands the result to ``exit_json``, a :class:`TaskFailed` to
``fail_json``.

Stdlib only, Python 3.8+: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple


class TaskFailed(Exception):
    """The task fails: ``fail_json``'s message and the result keys reported with it."""

    def __init__(self, msg: str, **result: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


class Task:
    """``run(argv) -> (rc, stdout, stderr)``; ``which(name, required=False, opt_dirs=None)``, the executable's path
    or None (AnsibleModule.get_bin_path: PATH, then ``opt_dirs`` and the sbin directories); ``warn(message)``;
    ``check_mode``."""

    def __init__(self, run: Callable[[Sequence[str]], Tuple[int, str, str]], which: Callable[..., Optional[str]],
                 warn: Callable[[str], None], check_mode: bool = False) -> None:
        self.run = run
        self.which = which
        self.warn = warn
        self.check_mode = check_mode


def of(module: Any, c_locale: bool = True) -> Task:
    """The :class:`Task` of an AnsibleModule; its commands run under ``LC_ALL=C`` (numbers and messages as
    parsed) unless ``c_locale`` is False."""
    env = {"LC_ALL": "C"} if c_locale else None

    def run(argv: Sequence[str]) -> Tuple[int, str, str]:
        return module.run_command(list(argv), environ_update=env)

    return Task(run, module.get_bin_path, module.warn, module.check_mode)


def exit_with(module: Any, work: Callable[[dict, Task], dict], c_locale: bool = True) -> None:
    """``module.exit_json(**work(module.params, of(module)))``; a :class:`TaskFailed` ends in ``fail_json``."""
    try:
        result = work(module.params, of(module, c_locale))
    except TaskFailed as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    module.exit_json(**result)
