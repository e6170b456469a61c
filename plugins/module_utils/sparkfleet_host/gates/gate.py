# Copyright: sparkfleet contributors
# Apache-2.0
"""What a preflight gate is (:class:`Gate`) and what the gates read the host through: :class:`Probe` (the work
dir, nvidia-smi run by an injected runner, one shared ``--query-gpu``) and :class:`Command` (a command's outcome
as ``ansible.builtin.command`` reports it).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..contract.fields import Field
from ..sensors.gpu import GpuSensorError, query_gpu

KIB_PER_GIB = 1024 * 1024

#: A gate's record in ``preflight.json``: ``value``, ``limit``, ``pass`` (None: not measured), ``unit`` where
#: there is one, ``error`` where measuring can fail, and what else the gate wants to show.
Record = Dict[str, Any]
GpuRows = List[Dict[str, Optional[str]]]


class Command(object):
    """A command's outcome as ``ansible.builtin.command`` reports it: output without its final newlines, and
    ``msg`` (``non-zero return code`` when rc is not 0, ``Error executing command.`` when it could not start)."""

    __slots__ = ("rc", "stdout", "stderr", "msg")

    def __init__(self, rc: int, stdout: str = "", stderr: str = "", msg: Optional[str] = None) -> None:
        self.rc = rc
        self.stdout = stdout.rstrip("\r\n")
        self.stderr = stderr.rstrip("\r\n")
        self.msg = msg if msg is not None else ("non-zero return code" if rc != 0 else "")

    @classmethod
    def not_started(cls, rc: int) -> "Command":
        return cls(rc, msg="Error executing command.")

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def lines(self) -> List[str]:
        return self.stdout.splitlines()

    @property
    def error(self) -> str:
        """What a gate records as its ``error`` when this command left it unmeasured."""
        return (self.stdout + self.stderr + self.msg).strip()


CommandRunner = Callable[[Sequence[str]], Command]


def query_gpus(fields: Sequence[str], nvidia_smi: str, run: CommandRunner) -> Tuple[GpuRows, str]:
    """One ``--query-gpu`` of ``fields`` (through :func:`gpu.query_gpu`): the rows, and the text a GPU gate
    records as its ``error`` when it cannot read its figure from them (the command's output, or why it failed)."""
    ran: List[Command] = []

    def runner(argv: Sequence[str]) -> Tuple[int, str, str]:
        ran.append(run(argv))
        return ran[-1].rc, ran[-1].stdout, ran[-1].stderr

    try:
        rows = query_gpu(fields, nvidia_smi, runner)
    except GpuSensorError as exc:
        return [], ran[-1].error if ran and not ran[-1].ok else str(exc)
    return rows, ran[-1].error


class Probe(object):
    """The host as the gates read it: ``work_dir``, ``nvidia_smi`` run through ``run``, and :meth:`gpus`, one
    ``--query-gpu`` of ``gpu_fields`` (every field the gates read) that runs once however many gates read it."""

    def __init__(self, work_dir: str, nvidia_smi: str, run: CommandRunner, gpu_fields: Sequence[str]) -> None:
        self.work_dir, self.nvidia_smi, self.run, self.gpu_fields = work_dir, nvidia_smi, run, tuple(gpu_fields)
        self._gpus: Optional[Tuple[GpuRows, str]] = None

    def gpus(self) -> Tuple[GpuRows, str]:
        """The rows of the shared ``--query-gpu`` and its ``error`` text (see :func:`query_gpus`)."""
        if self._gpus is None:
            self._gpus = query_gpus(self.gpu_fields, self.nvidia_smi, self.run)
        return self._gpus


def _shown(value: Any) -> str:
    """A value as the role's Jinja printed it (None as nothing)."""
    return "" if value is None else str(value)


def measured_text(name: str, record: Mapping[str, Any]) -> str:
    """``NAME measured VALUE UNIT (limit LIMIT UNIT)``: a failed gate in the failure message."""
    unit = " " + record["unit"] if "unit" in record else ""
    return "%s measured %s%s (limit %s%s)" % (name, _shown(record["value"]), unit, _shown(record["limit"]), unit)


def own_error(record: Mapping[str, Any], measured: Any) -> str:
    """Why a gate could not be measured: its record's ``error`` (nothing when it keeps none)."""
    return record.get("error", "")


class Gate(object):
    """One preflight gate, declared in its own file and listed in the registry (``gates/__init__.py``).

    ``name``: its key in ``preflight.json`` and in messages. ``fields``: its limits, each a :class:`Field` whose
    ``name`` is the inventory setting (``sparkfleet_preflight_*``, in the controller's settings table) and whose
    ``option`` is its key in the module's ``limits``. ``measure(probe)``: what it reads from the host (a figure
    Linux always has may raise OSError/ValueError/IndexError: the task then fails; one that may be missing, such
    as a GPU's, is measured as unknown). ``judge(limits, measured)``: its :data:`Record`, pure. ``gpu_fields``:
    the ``--query-gpu`` fields it reads through :meth:`Probe.gpus`. ``failure(name, record)``: the gate in the
    failure message. ``unknown(record, measured)``: why it could not be measured, for the warning.
    """

    __slots__ = ("name", "fields", "measure", "judge", "gpu_fields", "failure", "unknown")

    def __init__(self, name: str, fields: Sequence[Field], measure: Callable[[Probe], Any],
                 judge: Callable[[Mapping[str, Any], Any], Record], gpu_fields: Sequence[str] = (),
                 failure: Callable[[str, Mapping[str, Any]], str] = measured_text,
                 unknown: Callable[[Mapping[str, Any], Any], str] = own_error) -> None:
        self.name, self.fields, self.measure, self.judge = name, tuple(fields), measure, judge
        self.gpu_fields, self.failure, self.unknown = tuple(gpu_fields), failure, unknown

    def __repr__(self) -> str:
        return "Gate(%r)" % self.name


def gib(kib: int) -> float:
    """KiB (the kernel's "kB") as GiB rounded to 2 decimals, as the records show sizes."""
    return round(kib / KIB_PER_GIB, 2)
