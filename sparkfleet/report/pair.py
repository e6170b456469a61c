"""The pair preflight in the report (issue 36): each cluster's ``pair_preflight.json``, which
playbooks/pair_preflight.yml writes in rank 0's results directory (``<campaign>/<host>/pair_preflight.json``,
cluster/pair.py's ``judge``), as a table of its checks and one sentence with the verdict and its causes.

A file that is not such a verdict (not JSON, not an object, no checks) is a finding that names it; the report
goes on without it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.textfile import read_json_object
from sparkfleet.report.document import Paragraph, Section, table
from sparkfleet.report.types import Finding

PAIR_FILE = "pair_preflight.json"
#: Where the file lies below the report's root: the root is one host's directory, a campaign's, or the results root
#: above the campaigns. Globbed at these depths only: a walk would list every run directory of a large tree.
PATTERNS = (PAIR_FILE, f"*/{PAIR_FILE}", f"*/*/{PAIR_FILE}")
FINDING_KIND = "pair-preflight"


@dataclass(frozen=True)
class PairVerdict:
    """One cluster's verdict as pair_preflight.json holds it; ``path`` relative to the report's root."""

    path: str
    cluster: str
    nodes: tuple[str, ...]
    passed: bool
    causes: tuple[str, ...]
    checks: tuple[dict[str, Any], ...]


@dataclass
class PairStudy:
    verdicts: list[PairVerdict] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # files named pair_preflight.json that are no verdict

    @property
    def present(self) -> bool:
        return bool(self.verdicts or self.unreadable)


def find_files(root: Path) -> list[Path]:
    return sorted({path for pattern in PATTERNS for path in root.glob(pattern) if path.is_file()})


def _is_verdict(data: dict[str, Any] | None) -> bool:
    checks = (data or {}).get("checks")
    return isinstance(checks, list) and all(isinstance(c, dict) for c in checks) and isinstance(
        (data or {}).get("pass"), bool)


def read_verdict(path: Path, root: Path) -> PairVerdict | None:
    """The verdict in ``path``, or None when the file is not one."""
    data = read_json_object(str(path))
    if not _is_verdict(data):
        return None
    return PairVerdict(path=str(path.relative_to(root)), cluster=str(data.get("cluster") or "?"),
                       nodes=tuple(str(n) for n in data.get("nodes") or ()), passed=data["pass"],
                       causes=tuple(str(c) for c in data.get("causes") or ()), checks=tuple(data["checks"]))


def pair_study(root: Path) -> PairStudy:
    study = PairStudy()
    for path in find_files(root):
        verdict = read_verdict(path, root)
        if verdict is None:
            study.unreadable.append(str(path.relative_to(root)))
        else:
            study.verdicts.append(verdict)
    return study


def sentence(verdict: PairVerdict) -> str:
    """The verdict in one sentence: passed, or refused with each cause."""
    who = f"Cluster {verdict.cluster} ({', '.join(verdict.nodes) or 'no nodes named'})"
    if verdict.passed:
        return f"{who} passed the pair preflight: all {len(verdict.checks)} checks passed."
    return f"{who} failed the pair preflight: {'; '.join(verdict.causes) or 'no cause recorded'}."


def checks_frame(verdict: PairVerdict) -> pd.DataFrame:
    """check, node, verdict, reading, floor: one row per check (a file written before floors were recorded
    shows '-')."""
    return pd.DataFrame({
        "check": [str(c.get("check", "?")) for c in verdict.checks],
        "node": [str(c.get("node", "?")) for c in verdict.checks],
        "verdict": ["pass" if c.get("pass") is True else "fail" for c in verdict.checks],
        "reading": [str(c.get("reason", "")) for c in verdict.checks],
        "floor": [str(c.get("floor") or "-") for c in verdict.checks],
    }, columns=["check", "node", "verdict", "reading", "floor"])


def _unreadable_text(path: str) -> str:
    return (f"{path}: not a pair preflight verdict (not JSON, not an object, or no checks): left out of the "
            "Pair preflight section")


def section(study: PairStudy) -> Section | None:
    """Per cluster, its sentence and its checks; None when the tree holds no pair_preflight.json."""
    if not study.present:
        return None
    blocks: list = [Paragraph("The pair preflight (playbooks/pair_preflight.yml) checks, before serving on a "
                              "cluster, its links, RDMA, NCCL, the parity of its nodes and the readiness probe's "
                              "clocks. Each floor is a sparkfleet_pair_* setting.")]
    for verdict in study.verdicts:
        blocks.append(Paragraph(sentence(verdict)))
        blocks.append(table(checks_frame(verdict), f"Pair preflight of cluster {verdict.cluster} ({verdict.path})"))
    blocks += [Paragraph(_unreadable_text(path)) for path in study.unreadable]
    return Section("Pair preflight", blocks)


def findings(study: PairStudy) -> list[Finding]:
    """A refused pair (its causes as details) and every file that is no verdict."""
    out = [Finding(FINDING_KIND, sentence(v), details=v.causes, subject=f"cluster {v.cluster}")
           for v in study.verdicts if not v.passed]
    return out + [Finding(FINDING_KIND, _unreadable_text(path)) for path in study.unreadable]


def payload(study: PairStudy) -> dict[str, Any]:
    """``--json``'s ``pair_preflight``: each verdict with its sentence, and the unreadable files."""
    return {"verdicts": [{**asdict(v), "sentence": sentence(v)} for v in study.verdicts],
            "unreadable": list(study.unreadable)}
