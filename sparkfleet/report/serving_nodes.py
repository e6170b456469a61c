"""Is one model on several Sparks worth it? (issue 36 item 4): for each multi-node configuration (``llama.cpp on 2
nodes (layers)``, ``... (replicas)``, ``vllm on 2 nodes (tensor)``) against the same engine on one node, in one
environment and for one model, what the engine verdicts (the report's one rule, their family held) say of the
output rates: the aggregate one (what the extra node should buy) and the per-user one (what a user feels), point by
point. One line each in the verdict block, answering in words; nothing is judged here that the engine verdicts did
not judge. The arithmetic the owner needs beside it: N nodes pay for themselves in aggregate throughput only above
+(N − 1) x 100%.
"""

from __future__ import annotations

from sparkfleet import serving
from sparkfleet.report.types import Verdict, VerdictLine
from sparkfleet.report.verdicts import line_outcome
from sparkfleet.report.wording import pct, words

QUESTION = "two-sparks"
#: The output rates that answer it, per client: (aggregate, per user).
RATES = (("tg_tok_s", "tg_req_tok_s"), ("out_tok_s", "out_req_tok_s"))


def _pair(v: Verdict) -> tuple[str, str] | None:
    """(multi-node configuration, its engine alone) when ``v`` sets one against the other, else None."""
    for spread, alone in ((v.b, v.a), (v.a, v.b)):
        engine, nodes, _ = serving.configuration_of(spread)
        if nodes > 1 and serving.configuration_of(alone) == (engine, 1, None):
            return spread, alone
    return None


def _toward_spread(v: Verdict, spread: str) -> tuple[bool | None, float | None]:
    """(better, change %) of the multi-node side, whichever side of the comparison it was on."""
    if v.b == spread:
        return v.better, v.change_pct
    flipped = None if v.change_pct is None else (100 / (1 + v.change_pct / 100) - 100)
    return (None if v.better is None else not v.better), flipped


def _clause(metric: str, group: list[Verdict], spread: str) -> str:
    """"generation throughput (aggregate) over 4 points: higher at 3 (+12% to +80%), lower at 1 (−5%)"."""
    higher, lower, same, open_ = [], [], 0, 0
    for v in group:
        better, change = _toward_spread(v, spread)
        if v.outcome == "different":
            (higher if better else lower).append(change)
        elif v.outcome == "same":
            same += 1
        else:
            open_ += 1
    parts = []
    for name, changes in (("higher", higher), ("lower", lower)):
        if changes:
            known = [c for c in changes if c is not None]
            size = "" if not known else f" ({pct(min(known))})" if min(known) == max(known) else \
                f" ({pct(min(known))} to {pct(max(known))})"
            parts.append(f"{name} at {len(changes)}{size}")
    parts += [f"the same at {same}"] * bool(same) + [f"undetermined at {open_}"] * bool(open_)
    return f"{words(metric)} over {len(group)} point{'s' * (len(group) != 1)}: {', '.join(parts)}"


def _answer(aggregate: list[Verdict], spread: str, nodes: int) -> str:
    """The line's headline from the aggregate rate: does spreading the model pay for its nodes?"""
    moves = [_toward_spread(v, spread) for v in aggregate if v.outcome == "different"]
    if not moves:
        return "no difference in aggregate throughput shown at these loads"
    if all(better for better, _ in moves) and len(moves) == len(aggregate):
        gains = [c for _, c in moves if c is not None]
        pays = gains and min(gains) > (nodes - 1) * 100
        return ("higher aggregate throughput at every point" + (
            f", above the +{(nodes - 1) * 100}% that {nodes} nodes cost" if pays else
            f", but below the +{(nodes - 1) * 100}% that {nodes} nodes cost: less per node than one node alone"))
    if not any(better for better, _ in moves):
        return f"lower aggregate throughput than one node at {len(moves)} of {len(aggregate)} points: not worth it"
    return "higher aggregate throughput at some points, lower at others"


def node_lines(verdicts: list[Verdict], engine_question: str) -> list[VerdictLine]:
    """One line per (model, environment, multi-node configuration) the engine verdicts compared with its engine
    alone, from those verdicts (``engine_question``: their question)."""
    groups: dict[tuple[str, str, str, str], list[Verdict]] = {}
    for v in verdicts:
        pair = _pair(v) if v.question == engine_question else None
        if pair and any(v.metric in rates for rates in RATES):
            model, held, _ = v.subject.split(" / ", 2)
            groups.setdefault((model, held, *pair), []).append(v)
    lines = []
    for (model, held, spread, alone), group in groups.items():
        nodes = serving.configuration_of(spread)[1]
        by_metric = {m: [v for v in group if v.metric == m] for rates in RATES for m in rates}
        clauses = [_clause(m, vs, spread) for m, vs in by_metric.items() if vs]
        aggregate = next((by_metric[a] for a, _ in RATES if by_metric[a]), [])
        answer = _answer(aggregate, spread, nodes)
        text = (f"{spread} vs {alone} alone, {model} in environment {held} (engine verdicts, per point): "
                + "; ".join(clauses) + f". {answer[0].upper()}{answer[1:]}.")
        lines.append(VerdictLine(QUESTION, f"{model} / {held} / {spread}", line_outcome(group),
                                 line_outcome(group), text, tuple(group),
                                 f"Is {model} on {nodes} nodes worth it ({spread} vs one node, {held})? "
                                 f"{answer[0].upper()}{answer[1:]}."))
    return lines
