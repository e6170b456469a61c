# Copyright: sparkfleet contributors
# Apache-2.0
"""A pair preflight's probe inside the node's image (cluster/rdma_env.py, cluster/nccl_env.py), and a probe's output
in one line.

:class:`ProbeContainer` is one container of this process on the node: ``docker run`` of the campaign's image with an
environment's flags, placed as a run's process is (runexec.placed_command: the host's network, ``--gpus`` dropped
on a host without a GPU), named for this process so that nodes sharing one Docker engine never collide, and
removed after each use.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, List, Mapping, Optional

from ..run import runexec


def tail(text: str, n: int = 300) -> str:
    """The last ``n`` characters of a tool's output, its whitespace folded: what a reason quotes of it."""
    return " ".join(str(text).split())[-n:]


class ProbeContainer:
    """``docker`` running ``image`` as ``<prefix>-<pid>``, labelled ``sparkfleet.step=<step>``."""

    def __init__(self, docker: str, image: str, prefix: str, step: str) -> None:
        self.docker, self.image, self.step = docker, image, step
        self.name = "%s-%d" % (prefix, os.getpid())
        self.gpu_present = shutil.which("nvidia-smi") is not None

    def has_image(self) -> bool:
        return bool(self.image) and subprocess.run([self.docker, "image", "inspect", self.image],
                                                   capture_output=True).returncode == 0

    def wrap(self, environment: Mapping[str, Any],
             env: Optional[Mapping[str, str]] = None) -> Callable[[List[str]], List[str]]:
        """argv -> the command that runs it in ``environment`` ({name, kind, docker_flags}) with ``env``."""
        placed = dict(environment, image=self.image, docker=self.docker, gpu_present=self.gpu_present)
        return lambda argv: runexec.placed_command(self.name, argv, dict(env or {}), "/", placed,
                                                   {"sparkfleet.step": self.step})[0]

    def remove(self) -> None:
        subprocess.run([self.docker, "rm", "-f", self.name], capture_output=True)
