"""The winner as every view says it: `tune` and `select` (their closing lines), `status` and the HTML report
(its summary rows) all render the one list of facts made here, so a figure reads the same wherever it is shown.
A fact is a labelled text (the report's row); `line` is how a terminal prints it where that is not
"label: text" (a line indented under the winner, a finalist's column)."""
from __future__ import annotations

from dataclasses import dataclass

from ..measure.requirement import Requirement
from ..search.record import StoredStudy, Winner
from .as_run import (
    deployed_text,
    float_word,
    kept_in_float,
    kept_layers,
    not_deployed_lines,
    precision_text,
    vs_defaults_text,
    workload_lines,
)
from .finalists import FINALISTS_HEAD, finalist_rows

AGAINST_DEFAULTS = "winner against each runtime's defaults"


@dataclass(frozen=True)
class Fact:
    label: str
    text: str
    line: str | None = None  # the terminal's line, where not "label: text"

    def as_line(self) -> str:
        return self.line if self.line is not None else f"{self.label}: {self.text}"


def winner_facts(stored: StoredStudy, study: str, names: bool = False) -> list[Fact]:
    """What is known of the study's winner: none selected, none feasible (and the closest), or the winner's
    confirmed figures, finalists, deployment check, speed over each runtime's defaults and `tuner verify`'s
    figures. names: name the layers the winner keeps in float (the report), else count them (a terminal)."""
    w = stored.winner
    if w is None:
        if not stored.selected:
            return [Fact("winner", f"none selected yet: run `tuner select --study {study}`")]
        best = stored.best_effort
        return [Fact("winner", "none: no trial meets the requirement" + (
            f"; the closest is trial {best['trial']} (violations {best.get('violations')}): export it with "
            "--best-effort" if best else ""))]
    facts = [Fact("winner", _headline(w))]
    facts += [Fact("speedup per set of shapes", line.strip(), line) for line in workload_lines(w.confirmed_workload)]
    facts.append(_float_layers(w, names))
    if w.busy:
        facts.append(Fact("warning", f"the winner was chosen while other processes used {w.load['other_cores']:.1f} "
                                     f"cores; run `tuner select --study {study}` again on a quiet machine"))
    rows = finalist_rows(w)
    if any(label != "tie" for label, _ in rows):
        facts.append(Fact("finalists", FINALISTS_HEAD, f"finalists, {FINALISTS_HEAD}:"))
    facts += [Fact(f"finalist {label}", text, f"  {label:10s} {text}") for label, text in rows if label != "tie"]
    facts += [Fact("tie within noise", text, f"tie: {text}") for label, text in rows if label == "tie"]
    deployed = deployed_text(w.deployed, w.speedup)
    if deployed:
        facts.append(Fact("deployment check", deployed, f"winner {deployed}"))
    facts += [Fact("not the winner", line, line) for line in not_deployed_lines(w)]
    against = vs_defaults_text(w)
    if against:
        facts.append(Fact(AGAINST_DEFAULTS, against))
    if w.verify:
        v = w.verify
        busy = " - machine busy" if v.get("busy") else ""
        facts.append(Fact("verify", f"{v['speedup']:.2f}x the defaults, each engine in a fresh process (95% "
                                    f"{v['speedup_low']:.2f}-{v['speedup_high']:.2f}){busy}"))
        if v.get("alone"):
            alone = deployed_text(v["alone"], v.get("claimed_speedup"))
            facts.append(Fact("verify alone", alone, f"verify: {alone}"))
    return facts


def winner_lines(stored: StoredStudy, study: str) -> list[str]:
    """winner_facts as a terminal prints them."""
    return [f.as_line() for f in winner_facts(stored, study)]


def _headline(w: Winner) -> str:
    """"trial 7, 1.46x the baseline, confirmed side by side (2.23 ms [95% CI 2.10, 2.40]; baseline 3.26 ms),
    cos=0.00307, onnxruntime, precision int8-dynamic, computed as ...": the requirement's metrics only."""
    lat = w.confirmed_latency
    speed = f"{w.speedup:.2f}x the baseline, " if w.speedup else ""
    base = f"; baseline {w.baseline_latency['median_ms']:.2f} ms" if w.speedup and w.baseline_latency else ""
    named = {b.metric for b in Requirement.parse(w.requirement, load_user_metrics=False).bounds} if w.requirement else set()
    err = ", ".join(f"{k}={v:.3g}" for k, v in w.confirmed_metrics.items() if k in named)
    backend = f"{w.config['backend']}, " if "backend" in w.config else ""
    return (f"trial {w.trial}, {speed}confirmed side by side ({lat['median_ms']:.2f} ms [95% CI {lat['ci_low_ms']:.2f}, "
            f"{lat['ci_high_ms']:.2f}]{base}), {err or 'no requirement'}, {backend}{precision_text(w.config, w.precision)}")


def _float_layers(w: Winner, names: bool) -> Fact:
    """The layers the winner keeps in float (its config's per-layer lists): counted under the winner's line, or
    named (the report)."""
    kept = kept_layers(w.config)
    count = kept_in_float(len(kept), w.precision)
    if not names:
        return Fact("winner's float layers", count, f"  {count}")
    if not kept:
        return Fact("winner's float layers", "none: every quantizable layer of its route is quantized (or its route "
                                             "is a float one)")
    floats = float_word(w.precision)
    here = f" ({floats} here)" if floats and floats != "fp32" else ""
    return Fact("winner's float layers", f"{len(kept)}{here}: " + ", ".join(kept[:24]) + (" ..." if len(kept) > 24 else ""))
