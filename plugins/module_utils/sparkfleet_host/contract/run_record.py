# -*- coding: utf-8 -*-
"""Recording one run: its record.json (through the contract, record.write_record) and its ledger events.

Used by ``matrix_run`` (the bench_run module's job). A :class:`Recorder` belongs to one planned run
(``matrix_run.PlannedRun``): it builds the run's record, keeps space aside so that a run that fills the disk
can still be recorded as failed, writes the record and the ``finished`` event, and on resume finds a finished
run's record (or moves a partial run directory aside).
"""

from __future__ import annotations

import json
import os

from .ledger import append_finished
from .record import RETRY_STATUSES, STATUSES, ContractError, new_record, write_record

#: Space set aside before each run so that a run that fills the disk can still be recorded as failed.
RESERVE_BYTES = 512 * 1024
LOW_SPACE_BYTES = 4 * 1024 * 1024


#: The versions that name the campaign's image: a bare run uses none (it runs the host's own software).
IMAGE_VERSIONS = ("image", "image_ref")


def run_versions(versions, kind: str) -> dict:
    """The record's ``versions`` for a run of environment ``kind``: bench_run's versions, without the campaign's
    image for a bare run (issue 35: a bare run's record names no image it never used)."""
    out = dict(versions or {})
    if kind == "bare":
        for key in IMAGE_VERSIONS:
            out.pop(key, None)
    return out


class Recorder:
    """The record and ledger writes of one planned run (``run``: a matrix_run.PlannedRun)."""

    def __init__(self, run, campaign: str, host: str, versions: dict):
        self.run = run
        self.campaign, self.host, self.versions = campaign, host, versions

    def new_record(self, kind: str):
        """The run's record from the contract's one builder (sparkfleet_host.contract.record.new_record)."""
        run, plan = self.run, self.run.plan
        return new_record(
            self.campaign, self.host, run.model["name"], run.environment["name"], run.workload["name"],
            int(plan["iteration"]),
            model_id=run.model.get("hf_id") or run.model.get("path"),
            environment_kind=kind,
            workload_params={k: v for k, v in run.workload.items() if k not in ("name", "env")},
            engine=run.workload.get("engine"),
            warmup=bool(plan.get("warmup")),
            order_index=plan.get("order_index"),
            versions=run_versions(self.versions, kind),
        )

    def reserve_space(self) -> None:
        """Keep RESERVE_BYTES aside for this run's record (OSError: the disk is already full)."""
        if not os.path.exists(self.run.reserve):
            with open(self.run.reserve, "wb") as fh:
                fh.write(b"\0" * RESERVE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())

    def write(self, record, status: str, reason, metrics: dict):
        """Write the record and its ``finished`` event: (the record as written, written). A full disk is named
        as the run's reason; the reserved space is given to the record if it does not fit otherwise."""
        run = self.run
        try:
            st = os.statvfs(run.host_dir)
            low = st.f_bavail * st.f_frsize < LOW_SPACE_BYTES
        except OSError:
            low = False
        if low:  # whatever the workload said, a full disk is the cause worth naming
            status = "failed" if status == "ok" else status
            reason = "disk full on %s (%s)" % (run.host_dir, reason or "the run's output could not be written")
        record.status, record.reason, record.metrics = status, reason, metrics
        written = True
        data = record.to_dict()
        for attempt in (1, 2):
            try:
                # Validated against the contract as it is written: a record that breaks it is written as a
                # failed run whose reason names the violation, never as a file the report would skip.
                data, _ = write_record(run.record_path, record)
                append_finished(run.ledger, run.rid, data, run.plan.get("order_index"))
                break
            except (ContractError, OSError) as exc:  # ContractError: the identity itself is broken
                if isinstance(exc, OSError) and attempt == 1 and os.path.exists(run.reserve):
                    os.unlink(run.reserve)  # give the record the space kept for it, then try again
                    continue
                written = False
                data["reason"] = "%s; record not written: %s" % (reason or status, exc)
                break
        return data, written

    # ---------------------------------------------------------------------------- resume
    def previous(self, states: dict, retry_failed: bool):
        """The finished record when this run is already done, else None (after moving a partial dir aside).

        ``states``: the ledger's run states, read once per job (a run's own state changes only by its own run).
        """
        run = self.run
        state = states.get(run.rid)
        record = None
        if os.path.exists(run.record_path):
            try:
                with open(run.record_path) as fh:
                    record = json.load(fh)
            except ValueError:
                record = None
        if record and record.get("status") in STATUSES:
            if not state or state.get("event") != "finished":  # crashed between record and ledger
                append_finished(run.ledger, run.rid, record, run.plan.get("order_index"), recovered=True)
            if retry_failed and record["status"] in RETRY_STATUSES:
                self.move_aside("retried")
                return None
            return record
        if os.path.isdir(run.run_dir):
            self.move_aside("interrupted")
        return None

    def move_aside(self, why: str) -> None:
        """Keep the run's directory beside it as ``<run_id>.<why>-N``."""
        run_dir = self.run.run_dir
        n = 1
        while os.path.exists("%s.%s-%d" % (run_dir, why, n)):
            n += 1
        os.rename(run_dir, "%s.%s-%d" % (run_dir, why, n))
