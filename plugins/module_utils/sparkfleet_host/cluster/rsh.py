# Copyright: sparkfleet contributors
# Apache-2.0
"""Whether rank 0 reaches its workers the way OpenMPI's mpirun will: its rsh launcher runs ``<agent> <host> orted
...`` for each other node (the agent: the MCA parameter plm_rsh_agent, ``OMPI_MCA_plm_rsh_agent`` in the
environment, else ssh). A worker it cannot reach non-interactively makes mpirun fail with a page of generic
causes; checked first, the run's reason names the worker and what ssh said.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import shlex
import subprocess
from typing import Dict, List, Optional

#: OpenMPI's default agent (orte/mca/plm/rsh: "ssh : rsh", the first found), asked never to prompt.
DEFAULT_AGENT = ["ssh", "-o", "BatchMode=yes"]
#: How long one worker may take to answer.
REACH_TIMEOUT_S = 30.0


def agent(env: Dict[str, str]) -> List[str]:
    """The command mpirun reaches the other nodes with: ``OMPI_MCA_plm_rsh_agent`` (its first alternative, as
    OpenMPI reads ``a : b``), else ssh in batch mode."""
    given = (env.get("OMPI_MCA_plm_rsh_agent") or "").split(":", 1)[0].strip()
    return shlex.split(given) if given else list(DEFAULT_AGENT)


def unreachable(workers: List[str], env: Dict[str, str], timeout_s: float = REACH_TIMEOUT_S) -> Optional[str]:
    """Why rank 0 cannot run a command on each of ``workers`` through :func:`agent` (None when it can)."""
    command = agent(env)
    problems = []
    for address in workers:
        argv = command + [address, "true"]
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace",
                                  stdin=subprocess.DEVNULL, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append("%s: %s" % (address, exc))
            continue
        if proc.returncode != 0:
            said = " ".join((proc.stderr or proc.stdout).split())[-300:]
            problems.append("%s: `%s` exited with %d (%s)" % (address, " ".join(argv), proc.returncode,
                                                              said or "nothing said"))
    if not problems:
        return None
    return ("mpirun on rank 0 starts the other ranks over SSH, and rank 0 cannot run a command on %s without a "
            "prompt; set up passwordless SSH from rank 0 to every worker (its key in the worker's authorized_keys, "
            "the worker's host key in known_hosts; OMPI_MCA_plm_rsh_agent for an agent of its own)"
            % "; ".join(problems))
