"""A crash can cut the ledger's last line short; the next event (a resume's `recovered`, a new `started`) must
start on a line of its own, so that neither it nor any later event is lost to the torn line."""

from __future__ import annotations

from _ansible_modules import host_util

ledger = host_util("ledger")


def test_an_event_after_a_torn_line_is_read_back(tmp_path):
    path = str(tmp_path / "ledger.jsonl")
    ledger.append_event(path, "started", "r1")
    with open(path, "ab") as fh:
        fh.write(b'{"event": "finished", "run_id": "r1", "sta')  # the crash, mid-write
    ledger.append_event(path, "finished", "r1", status="ok", recovered=True)
    ledger.append_event(path, "started", "r2")
    events = ledger.read_events(path)
    assert [(e["event"], e["run_id"]) for e in events] == [("started", "r1"), ("finished", "r1"), ("started", "r2")]
    assert events[1]["recovered"] is True
    assert ledger.run_states(path)["r1"]["status"] == "ok"


def test_a_whole_ledger_gets_no_blank_lines(tmp_path):
    path = str(tmp_path / "ledger.jsonl")
    for rid in ("r1", "r2"):
        ledger.append_event(path, "started", rid)
    with open(path, "rb") as fh:
        assert b"\n\n" not in fh.read()
