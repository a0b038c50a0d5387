"""The finalists of a winner selection, for `tune`, `select` and the report: their side-by-side medians
with the spread of the runs (p10-p90) and the 95% CI of the median, and which tie the winner within noise."""
from __future__ import annotations

from ..measure.latency import MAX_SPREAD, ci_overlap, steady
from .as_run import runtime_name

FINALISTS_HEAD = "timed side by side (median, p10-p90 of the runs, 95% CI of the median)"


def tied_with_winner(winner: dict) -> list[dict]:
    """The other finalists that passed the accuracy re-check and whose 95% interval overlaps the winner's:
    of the ratio to the baseline where the finalists were timed in blocks with it, else of the median."""
    fin = winner.get("finalists") or []
    own = next((f for f in fin if f["trial"] == winner["trial"]), None)
    if own is None:
        return []

    def overlap(a: dict, b: dict) -> bool:
        if a.get("relative") and b.get("relative"):
            ra, rb = a["relative"], b["relative"]
            return ra["ci_low"] <= rb["ci_high"] and rb["ci_low"] <= ra["ci_high"]
        return ci_overlap(a, b)

    return [f for f in fin if f is not own and f["feasible"] and overlap(own, f)]


def finalist_rows(winner: dict) -> list[tuple[str, str]]:
    """(label, text) per finalist, fastest first, then one for a tie; [] for a winner stored without them."""
    fin = winner.get("finalists") or []
    rows = []
    for f in fin:
        role = ["winner"] if f["trial"] == winner["trial"] else []
        role += ["baseline"] if f.get("baseline") else []
        role += [f"{runtime_name(f['defaults'])}'s defaults"] if f.get("defaults") and not f.get("baseline") else []
        role += [] if f["feasible"] else ["failed the accuracy re-check"]
        role += [] if steady(f["p10_ms"], f["p90_ms"]) else [f"unsteady: p90 over {MAX_SPREAD:g}x p10"]
        rel = f.get("relative")
        ratio = (f"{1 / rel['ratio']:.2f}x the baseline [95% {1 / rel['ci_high']:.2f}-{1 / rel['ci_low']:.2f}], "
                 if rel and min(rel["ratio"], rel["ci_low"]) > 0 else "")
        rows.append((f"trial {f['trial']}", f"{ratio}{f['median_ms']:.3f} ms, p10-p90 {f['p10_ms']:.3f}-{f['p90_ms']:.3f}, "
                                            f"95% CI [{f['ci_low_ms']:.3f}, {f['ci_high_ms']:.3f}]"
                                            + (f"  ({', '.join(role)})" if role else "")))
    if winner.get("tie"):  # selected with the simplest-among-ties rule (tuner.winner.select.simplest_among_ties)
        rows.append(("tie", _simplest_tie_text(winner)))
    tied = tied_with_winner(winner) if "tie" not in winner else []  # a winner stored before that rule
    if tied:
        names = ", ".join(f"{f['trial']}" + (" (the baseline)" if f.get("baseline") else "") for f in tied)
        rows.append(("tie", f"trial {winner['trial']} ties trial {names} within noise (their 95% intervals overlap): it "
                            "won only by a lower figure, so any of them is as fast as this machine can tell"))
    return rows


def _simplest_tie_text(winner: dict) -> str:
    tie, fin = winner["tie"], {f["trial"]: f for f in winner.get("finalists") or []}

    def name(n: int) -> str:
        return f"{n}" + (" (the baseline)" if fin.get(n, {}).get("baseline") else "")

    def choices(n: int) -> str:
        c = fin.get(n, {}).get("choices")
        return "?" if c is None else str(c)

    others = ", ".join(name(n) for n in tie["trials"])
    faster = "" if tie["fastest"] == winner["trial"] else f"; trial {tie['fastest']} read fastest"
    return (f"trial {name(winner['trial'])} ties trial {others} within noise (their 95% intervals overlap the "
            f"fastest's{faster}): the simplest of them wins, with {choices(winner['trial'])} choices off the "
            f"defaults ({', '.join(f'trial {n}: {choices(n)}' for n in tie['trials'])})")
