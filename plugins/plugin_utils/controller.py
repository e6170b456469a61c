# Copyright: sparkfleet contributors
# Apache-2.0
"""What the collection's controller-side plugins share: splitting a host command's output, checking arguments."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


def marked_sections(text: str, mark: str) -> list[tuple[str, str]]:
    """A host command's output split at its ``<mark> <name>`` lines: (name, the text up to the next mark), in
    order. Lines before the first mark are dropped."""
    sections: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith(mark + " "):
            sections.append((line[len(mark) + 1:].strip(), ""))
        elif sections:
            sections[-1] = (sections[-1][0], sections[-1][1] + line + "\n")
    return sections


def checked_args(spec: dict, args: dict) -> dict:
    """The task's arguments typed and defaulted by ``spec``; AnsibleActionFail naming each bad one."""
    validated = ArgumentSpecValidator(spec).validate(dict(args))
    if validated.error_messages:
        raise AnsibleActionFail("; ".join(validated.error_messages))
    return validated.validated_parameters
