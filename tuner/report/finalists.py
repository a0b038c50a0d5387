"""The finalists of a winner selection, for `tune`, `select` and the report: their side-by-side medians
with the spread of the runs (p10-p90) and the 95% CI of the median, and which tie the winner within noise."""
from __future__ import annotations

from ..measure.latency import MAX_SPREAD, ci_overlap, steady
from ..search.record import Finalist, Tie, Winner
from .as_run import runtime_name

FINALISTS_HEAD = "timed side by side (median, p10-p90 of the runs, 95% CI of the median)"


def tied_with_winner(winner: Winner) -> list[Finalist]:
    """The other finalists that passed the accuracy re-check and whose 95% interval overlaps the winner's:
    of the ratio to the baseline where the finalists were timed in blocks with it, else of the median."""
    own = next((f for f in winner.finalists if f.trial == winner.trial), None)
    if own is None:
        return []

    def overlap(a: Finalist, b: Finalist) -> bool:
        if a.relative and b.relative:
            return ci_overlap((a.relative["ci_low"], a.relative["ci_high"]), (b.relative["ci_low"], b.relative["ci_high"]))
        return ci_overlap((a.ci_low_ms, a.ci_high_ms), (b.ci_low_ms, b.ci_high_ms))

    return [f for f in winner.finalists if f is not own and f.feasible and overlap(own, f)]


def finalist_rows(winner: Winner) -> list[tuple[str, str]]:
    """(label, text) per finalist, fastest first, then one for a tie; [] for a winner stored without them."""
    rows = []
    for f in winner.finalists:
        role = ["winner"] if f.trial == winner.trial else []
        role += ["baseline"] if f.baseline else []
        role += [f"{runtime_name(f.defaults)}'s defaults"] if f.defaults and not f.baseline else []
        role += [] if f.feasible else ["failed the accuracy re-check"]
        role += [] if steady(f.p10_ms, f.p90_ms) else [f"unsteady: p90 over {MAX_SPREAD:g}x p10"]
        rel = f.relative
        ratio = (f"{1 / rel['ratio']:.2f}x the baseline [95% {1 / rel['ci_high']:.2f}-{1 / rel['ci_low']:.2f}], "
                 if rel and min(rel["ratio"], rel["ci_low"]) > 0 else "")
        rows.append((f"trial {f.trial}", f"{ratio}{f.median_ms:.3f} ms, p10-p90 {f.p10_ms:.3f}-{f.p90_ms:.3f}, "
                                         f"95% CI [{f.ci_low_ms:.3f}, {f.ci_high_ms:.3f}]"
                                         + (f"  ({', '.join(role)})" if role else "")))
    if winner.tie:  # selected with the simplest-among-ties rule (tuner.winner.select.simplest_among_ties)
        rows.append(("tie", _simplest_tie_text(winner, winner.tie)))
    tied = tied_with_winner(winner) if not winner.tie_ruled else []  # a winner stored before that rule
    if tied:
        names = ", ".join(f"{f.trial}" + (" (the baseline)" if f.baseline else "") for f in tied)
        rows.append(("tie", f"trial {winner.trial} ties trial {names} within noise (their 95% intervals overlap): it "
                            "won only by a lower figure, so any of them is as fast as this machine can tell"))
    return rows


def _simplest_tie_text(winner: Winner, tie: Tie) -> str:
    fin = {f.trial: f for f in winner.finalists}

    def name(n: int) -> str:
        return f"{n}" + (" (the baseline)" if n in fin and fin[n].baseline else "")

    def choices(n: int) -> str:
        c = fin[n].choices if n in fin else None
        return "?" if c is None else str(c)

    others = ", ".join(name(n) for n in tie.trials)
    faster = "" if tie.fastest == winner.trial else f"; trial {tie.fastest} read fastest"
    return (f"trial {name(winner.trial)} ties trial {others} within noise (their 95% intervals overlap the "
            f"fastest's{faster}): the simplest of them wins, with {choices(winner.trial)} choices off the "
            f"defaults ({', '.join(f'trial {n}: {choices(n)}' for n in tie.trials)})")
