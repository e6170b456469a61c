"""What differed between hosts: the facts and the measured state behind a cross-host difference.

A host outside the fleet's tolerance is only half an answer; the other half is what was different about
it. This reads each host's facts (``host.json``, ``host_metadata.json``, ``preflight.json``: read by
sparkfleet.report.host_facts) and the telemetry summaries of its runs, and reports (a) facts that are not
the same on every host (driver, VBIOS, CUDA, kernel, GPU model, power limit, ...) and (b) measured state that
deviates from the fleet median (SM clock, temperature, power, throttle reasons).

The ``sparkfleet fleet`` command's helper: it uses the report's pieces (the one-campaign check, the host
facts), never the other way round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sparkfleet import reproducibility
from sparkfleet.compare import FAMILY_METHOD
from sparkfleet.load import load_runs
from sparkfleet.report.analysis import check_one_campaign
from sparkfleet.report.host_facts import facts_of, unread_facts, unread_sentences
from sparkfleet.report.host_normal import HostCheck, check_hosts, refusal_text
from sparkfleet.stats import ok_runs

#: Telemetry summary columns (record.telemetry.*) compared against the fleet median, and how.
TELEMETRY = {
    "telemetry_sm_clock_mhz_mean": "SM clock (MHz, mean)",
    "telemetry_gpu_temp_c_max": "GPU temperature (°C, max)",
    "telemetry_gpu_power_w_mean": "GPU power (W, mean)",
    "telemetry_gpu_util_pct_mean": "GPU utilisation (%, mean)",
    "cooldown_start_temp_c": "start temperature (°C)",
}


@dataclass
class FleetState:
    hosts: list[str]
    facts: pd.DataFrame  # host x fact
    differing_facts: dict[str, dict[str, Any]]  # fact -> {host: value}, only facts not equal everywhere
    telemetry: pd.DataFrame  # host x telemetry median
    telemetry_outliers: list[dict[str, Any]]  # {host, what, value, fleet_median, deviation_pct}
    throttle: dict[str, list[str]]  # host -> throttle reasons seen in any run
    deviations: pd.DataFrame  # reproducibility.host_deviations
    outside_hosts: list[str]
    missing: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> planned/found/missing
    verdicts: HostCheck | None = None  # "is this host normal?" (report/host_normal.py); None: no host-state evidence
    #: telemetry columns recorded on two or more hosts: the only ones compared with the fleet median
    telemetry_compared: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """Firmware or driver differ across hosts and nobody acknowledged it: the comparison is refused."""
        return self.verdicts is not None and self.verdicts.refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "outside_hosts": self.outside_hosts,
            "differing_facts": self.differing_facts,
            "telemetry_outliers": self.telemetry_outliers,
            "throttle_reasons": self.throttle,
            "missing_runs": self.missing,
            "unread_facts": unread_facts(self.facts),  # host -> {kind: [facts]} not read there: never a difference
            "telemetry_compared": self.telemetry_compared,
            "deviations": json.loads(self.deviations.to_json(orient="records")),
            **({"host_verdicts": self.verdicts.to_dict(), "refused": self.refused} if self.verdicts is not None
               else {}),
        }


def analyse(campaign_dir: str | Path, tolerance: float = reproducibility.DEFAULT_TOLERANCE,
            acknowledged: bool | None = None, reference: str | Path | None = None) -> FleetState:
    """The fleet's state; ``acknowledged`` (None: campaign.json says) and ``reference`` go to the host verdicts."""
    campaign_dir = Path(campaign_dir)
    loaded = load_runs(campaign_dir)
    runs = loaded.runs
    check_one_campaign(runs, campaign_dir)  # hosts are compared within one campaign, never across two
    ok = ok_runs(runs)  # a host's telemetry with its suspect runs: evidence of its state, not a result
    hosts = sorted({p.name for p in campaign_dir.iterdir() if (p / "host.json").exists() or (p / "runs").is_dir()})
    facts = facts_of({host: campaign_dir / host for host in hosts})
    differing = {}  # a fact a host did not read (host_facts: missing) is never a difference: only readers listed
    for column in facts.columns:
        values = facts[column].dropna()
        if values.map(str).nunique() > 1:
            differing[column] = {str(h): v for h, v in values.items()}
    telemetry_cols = [c for c in TELEMETRY if c in ok.columns]
    telemetry = (ok.groupby("host")[telemetry_cols].median(numeric_only=True) if telemetry_cols
                 else pd.DataFrame(index=hosts))
    outliers, compared = [], []
    for column in telemetry.columns:
        series = telemetry[column].dropna()
        if len(series) < 2:
            continue
        compared.append(column)
        median = float(series.median())
        for host, value in series.items():
            if median and abs(value - median) / abs(median) > tolerance:
                outliers.append({"host": host, "what": TELEMETRY[column], "value": round(float(value), 3),
                                 "fleet_median": round(median, 3),
                                 "deviation_pct": round((value - median) / abs(median) * 100, 2)})
    throttle = {}
    if "telemetry_throttle_reasons_seen" in ok.columns:
        for host, values in ok.groupby("host")["telemetry_throttle_reasons_seen"]:
            seen = set()
            for value in values.dropna():
                seen |= set(json.loads(value) if isinstance(value, str) and value.startswith("[") else [value])
            throttle[host] = sorted(str(s) for s in seen if s not in ("", "none"))
    deviations = reproducibility.host_deviations(ok, tolerance=tolerance, facts=facts)
    outside = sorted(set(deviations.loc[deviations["outside"], "host"].astype(str)))
    # planned (campaign.json) vs collected runs per host: what an unreachable host did not deliver
    missing = {key.split("/", 1)[1]: {"planned": c["planned"], "found": c["with_record"], "missing": c["missing"]}
               for key, c in loaded.accounting.planned_hosts.items() if c["missing"]}
    verdicts = check_hosts(campaign_dir, runs, tolerance=tolerance, reference=reference, acknowledged=acknowledged,
                           points=loaded.serving)  # serving points are host cells too, as in `report --hosts`
    return FleetState(hosts, facts, differing, telemetry, outliers, throttle, deviations, outside, missing, verdicts,
                      compared)


def render_markdown(state: FleetState, tolerance: float) -> str:
    alone = len(state.hosts) < 2  # one host: nothing was compared across hosts, and nothing may say it agrees
    lines = [f"# Fleet reproducibility: {len(state.hosts)} host{'' if len(state.hosts) == 1 else 's'}", ""]
    if state.refused:
        lines += [f"**{refusal_text(state.verdicts)}**", ""]
    if alone:
        lines.append(f"One host ({', '.join(state.hosts)}): there is no other host to compare it with, so this says "
                     "nothing about whether the fleet reproduces.")
    elif state.deviations.empty:
        lines.append("No cell and metric was measured on two or more hosts: no host was compared with the others.")
    elif state.outside_hosts:
        lines.append(f"**Hosts out (significantly different from the other hosts and by more than "
                     f"±{tolerance * 100:g}%):** {', '.join(state.outside_hosts)}")
        worst = state.deviations[state.deviations["outside"]].copy()
        worst["abs"] = worst["deviation_pct"].abs()
        lines += ["", "| host | cell | metric | host mean | others' mean | difference (95% CI) | p | what differs |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, row in worst.sort_values("abs", ascending=False).head(40).iterrows():
            cell = f"{row['model']}/{row['environment']}/{row['workload']}"
            lines.append(f"| {row['host']} | {cell} | {row['metric']} | {row['host_mean']:.4g} | "
                         f"{row['rest_mean']:.4g} | {row['deviation_pct']:+.2f}% ({row['ci_low_pct']:+.1f}% to "
                         f"{row['ci_high_pct']:+.1f}%) | {row['p_value']:.2g} | "
                         f"{row['hardware'] or 'no recorded fact differs'} |")
    else:
        lines.append(f"No host is out: none differs significantly from the other hosts by more than "
                     f"±{tolerance * 100:g}% on a shared cell.")
    undetermined = state.deviations[state.deviations["outcome"] == "undetermined"] if len(state.deviations) else []
    if len(undetermined):
        need = undetermined["required_n"].max()
        lines.append(f"{len(undetermined)} host/cell/metric comparison(s) are undetermined (too noisy to tell"
                     + (f"; about {need:.0f} runs per host would resolve ±{tolerance * 100:g}%)" if need == need
                        else ")"))
    if not alone and len(state.deviations):
        size = state.deviations["family_size"].max() if "family_size" in state.deviations else None
        lines.append(f"Significance is {FAMILY_METHOD}" + (f" (here {size:.0f} comparisons)." if size == size and size
                                                            else "."))
    lines += ["", "## What differed between hosts", ""]
    shared = [c for c in state.facts.columns if state.facts[c].notna().sum() >= 2]  # facts that were compared
    if alone:
        lines.append("The facts of one host: nothing to compare them with.")
    elif state.differing_facts:
        lines += ["| fact | " + " | ".join(state.hosts) + " |", "|---|" + "---|" * len(state.hosts)]
        for fact, values in state.differing_facts.items():
            lines.append(f"| {fact} | " + " | ".join(str(values[h]) if h in values else "not read"
                                                      for h in state.hosts) + " |")
    elif not shared:
        lines.append("No host fact was recorded on two or more hosts: none was compared.")
    else:
        named = ", ".join(map(str, shared[:8])) + (f" and {len(shared) - 8} more" if len(shared) > 8 else "")
        lines.append(f"The {len(shared)} facts recorded on two or more hosts ({named}) are the same on every host "
                     "that recorded them.")
    lines += [f"- {s}" for s in unread_sentences(state.facts)]  # unknown there: never a difference
    lines.append("")
    if state.telemetry_outliers:
        lines += ["Measured state away from the fleet median:", "",
                  "| host | what | value | fleet median | deviation |", "|---|---|---|---|---|"]
        for o in state.telemetry_outliers:
            lines.append(f"| {o['host']} | {o['what']} | {o['value']} | {o['fleet_median']} | "
                         f"{o['deviation_pct']:+.2f}% |")
    elif alone:
        lines.append("Measured state during the runs (clocks, temperature, power, utilisation) of one host: not "
                     "compared.")
    elif not state.telemetry_compared:
        lines.append("No measured state (clocks, temperature, power, utilisation) was recorded on two or more "
                     "hosts: none was compared.")
    else:
        words = ", ".join(TELEMETRY[c] for c in state.telemetry_compared)
        lines.append(f"Every host that recorded it is within ±{tolerance * 100:g}% of the fleet median during the runs "
                     f"in: {words}.")
    throttled = {h: r for h, r in state.throttle.items() if r}
    if throttled:
        lines += ["", "Throttle reasons seen: " + "; ".join(f"{h}: {', '.join(r)}" for h, r in throttled.items())]
    if state.verdicts is not None:
        lines += ["", "## Is each host normal?", "", *(f"- {s}" for s in state.verdicts.hosts["sentence"])]
    if state.missing:
        lines += ["", "## Missing runs", ""]
        lines += [f"- {h}: {m['missing']} of {m['planned']} planned runs have no record (host unreachable or "
                  "interrupted; re-run the same command to resume)" for h, m in sorted(state.missing.items())]
    return "\n".join(lines) + "\n"
