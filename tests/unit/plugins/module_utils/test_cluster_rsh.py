"""cluster/rsh.py: rank 0 reaches each worker as mpirun's rsh launcher will, before mpirun starts, so a run without
passwordless SSH is refused naming the worker and what ssh said (mpirun's own failure is a page of generic causes)."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import rsh

#: An agent as ssh behaves: a host it has no key for fails the way ssh does, the others run the command.
AGENT = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
if [ "$1" = 10.0.0.3 ]; then echo "Host key verification failed." >&2; exit 255; fi
exec "$2"
"""


def test_the_agent_is_openmpis_plm_rsh_agent_else_ssh_that_never_prompts():
    assert rsh.agent({}) == ["ssh", "-o", "BatchMode=yes"]
    assert rsh.agent({"OMPI_MCA_plm_rsh_agent": "ssh -p 2233 -i '/k ey'"}) == ["ssh", "-p", "2233", "-i", "/k ey"]
    assert rsh.agent({"OMPI_MCA_plm_rsh_agent": "/opt/my-ssh : rsh"}) == ["/opt/my-ssh"]  # the first alternative


def test_an_unreachable_worker_is_named_with_what_the_agent_said(tmp_path):
    script = tmp_path / "agent"
    script.write_text(AGENT)
    script.chmod(0o755)
    env = {"OMPI_MCA_plm_rsh_agent": str(script), "PATH": "/usr/bin:/bin"}
    assert rsh.unreachable(["10.0.0.2"], env) is None
    problem = rsh.unreachable(["10.0.0.2", "10.0.0.3"], env)
    assert problem.startswith("mpirun on rank 0 starts the other ranks over SSH, and rank 0 cannot run a command on "
                              f"10.0.0.3: `{script} 10.0.0.3 true` exited with 255 (Host key verification failed.)")
    assert "10.0.0.2" not in problem and "passwordless SSH" in problem
    assert (tmp_path / "calls").read_text().splitlines() == ["10.0.0.2 true", "10.0.0.2 true", "10.0.0.3 true"]
    missing = rsh.unreachable(["10.0.0.2"], {"OMPI_MCA_plm_rsh_agent": str(tmp_path / "none")})
    assert "10.0.0.2: [Errno 2] No such file or directory" in missing
