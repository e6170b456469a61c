# Copyright: sparkfleet contributors
# Apache-2.0
"""What the collection's controller-side plugins share: importing the sparkfleet package, checking arguments."""

from __future__ import annotations

import importlib

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


def sparkfleet(module: str):
    """``sparkfleet.<module>``, or an error that says how to run ansible with a Python that has it."""
    try:
        return importlib.import_module(f"sparkfleet.{module}")
    except ImportError as exc:  # the controller runs ansible from a Python without sparkfleet installed
        raise AnsibleError(f"sparkfleet is not importable by the Python running ansible ({exc}); "
                           "run ansible-playbook from the project's virtualenv (./bootstrap.sh bench)") from None


def checked_args(spec: dict, args: dict) -> dict:
    """The task's arguments typed and defaulted by ``spec``; AnsibleActionFail naming each bad one."""
    validated = ArgumentSpecValidator(spec).validate(dict(args))
    if validated.error_messages:
        raise AnsibleActionFail("; ".join(validated.error_messages))
    return validated.validated_parameters
