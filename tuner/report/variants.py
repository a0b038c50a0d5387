"""The route-variant table of a study's rankings (tuner.analysis.variants), as `tuner status`, `tuner sensitivity`,
`tune` and the report's summary print it: each variant's options, error and quick latency, and which
one the layers were ranked for."""
from __future__ import annotations


def _options(options: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "the space's defaults"


def row_text(row: dict, metric: str) -> str:
    """One variant: its options, then its error and quick latency, over the fp32 engine's where it was
    timed in turn with it (or why it did not build)."""
    if "failed" in row:
        return f"{_options(row['options'])}: does not build ({row['failed']})"
    ms = f", {row['ms']:.2f} ms" if row.get("ms") is not None else ""
    if row.get("ratio"):
        ms = f", {row['ratio']:.2f}x the fp32 engine ({row['ms']:.2f} ms)"
    tags = (["chosen"] if row.get("chosen") else []) + ([] if row.get("layers", True) else ["no layer kept in float under it"])
    return f"{_options(row['options'])}: {metric} {row['error']:.4g}{ms}" + (f"  ({'; '.join(tags)})" if tags else "")


def ranking_outcome(ranking: dict) -> str:
    """What came of the variant stage: the greedy float set of the chosen variant, or why no layer was ranked."""
    if ranking.get("dropped"):
        return "dropped: no variant builds on this model (see the note)"
    if ranking.get("skipped"):
        return f"layers not ranked: {ranking['skipped']}"
    n = ranking.get("cut", 0)
    if not ranking.get("greedy_feasible"):
        return f"layers ranked ({len(ranking.get('order', []))}); no float set met the requirement"
    return f"layers ranked for the chosen variant; greedy float set: {n} candidate{'s' if n != 1 else ''} " \
           f"{ranking['order'][:n]}"


def variant_lines(name: str, ranking: dict, outcome: bool = True) -> list[str]:
    """The table of one ranking, [] for a ranking stored before variants; outcome: with the line that
    says what came of it (ranked, skipped, dropped)."""
    rows = ranking.get("variants")
    if not rows:
        return []
    route = ranking.get("route") or {}
    label = " ".join(str(v) for v in (route.get("backend") or ranking.get("backend"), route.get("precision")) if v)
    fp32 = f"; fp32 engine {ranking['fp32_ms']:.2f} ms" if ranking.get("fp32_ms") else ""
    settings = ", ".join(f"{k}={v}" for k, v in (ranking.get("settings") or {}).items())
    out = [f"route variants of {label} ({name}), every layer quantized{f', with {settings}' if settings else ''}"
           f" (error, latency timed in turn with the fp32 engine{fp32}):"]
    out += [f"  {row_text(r, ranking.get('metric', 'error'))}" for r in rows]
    if outcome:
        out.append(f"  {ranking_outcome(ranking)}")
    return out


def rankings_lines(rankings: dict | None) -> list[str]:
    return [line for name, r in (rankings or {}).items() for line in variant_lines(name, r)]
