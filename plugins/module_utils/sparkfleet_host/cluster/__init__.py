# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code for a cluster: hosts that serve one model together (issue 36, "Two Sparks").

``fabric.py``: the RDMA rails a host has (read from sysfs), the NCCL / UCX / GLOO / MPI environment derived from
them, and the pure verdicts of a pair preflight (link, MTU, subnets, ib_write_bw / ib_write_lat floors, parity
of facts between nodes).

``probe_container.py``: a probe in the node's image (the pair preflight's RDMA and NCCL checks inside an environment).

Stdlib only, Python 3.8+.
"""
