"""ansible-playbook's PLAY RECAP as data: host -> {ok, changed, unreachable, failed, skipped, rescued, ignored}."""

from __future__ import annotations


def play_recap(stdout: str) -> dict[str, dict[str, int]]:
    """The counters of the last PLAY RECAP in ``stdout`` (a host line is ``name : ok=1 changed=0 ...``)."""
    rows = {}
    for line in stdout.split("PLAY RECAP")[-1].splitlines():
        host, sep, rest = line.partition(" : ")
        if sep:
            rows[host.strip()] = {k: int(v) for k, v in (item.split("=") for item in rest.split())}
    return rows
