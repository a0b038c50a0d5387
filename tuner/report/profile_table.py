"""`tuner profile`, the parent's half: each runtime node's time attributed to the model's ONNX node it stands
for, and the table of the winner against the baseline. The times come from the child's half,
tuner.execute.profiling. The profilers name what actually ran (a fused or quantized node:
"block0/ffn/fc1_quant", "block0/attn/scores/MatMulScaleFusion/"); attribute() maps each back to the model's
ONNX node whose name it extends, so the baseline's and the winner's rows line up. What maps to no node
(a fusion named after nothing, "BiasGelu") is a row of its own, by op type."""
from __future__ import annotations

from ..inputs.model import HEAVY_OPS, owning_consumer

_SEPARATORS = "_/.:"


def onnx_node_of(name: str, op_types: dict[str, str]) -> str | None:
    """The model node a runtime node's name stands for: the same name, else the longest node name it
    extends at a separator ("block0/ffn/fc1_quant" -> "block0/ffn/fc1"); None for none."""
    if name in op_types:
        return name
    for i in range(len(name) - 1, 0, -1):
        if name[i] in _SEPARATORS and name[:i] in op_types:
            return name[:i]
    return None


def attribute(rows: list[dict], graph_nodes: list[tuple[str, str]],
              consumers: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """Runtime rows summed per model node: {node name or "(OP)": {"ms", "op" (the model's op type, or what
    ran), "ran_as": [ops that ran]}}. A runtime node holding several model nodes (OpenVINO's originalLayersNames)
    counts for its MatMul/Gemm/Conv one, else its first. A MatMul/Gemm/Conv no runtime node names (OpenVINO's
    fp32 FullyConnected is named after the bias Add it took) goes with the runtime node that holds its consumer
    (consumers: consumers_of(the model))."""
    op_types = dict(graph_nodes)
    mapped = [[n for n in (onnx_node_of(o, op_types) for o in [*r.get("originals", []), r["name"]]) if n] for r in rows]
    owner = {n: i for i, names in enumerate(mapped) for n in names}
    for name, op in graph_nodes:  # vanished heavy nodes: follow the consumers to a node with an owner
        if op not in HEAVY_OPS or name in owner or not consumers:
            continue
        c = owning_consumer(name, consumers, owner)
        if c is not None:
            owner[name] = owner[c]
            mapped[owner[c]].append(name)
    out: dict[str, dict] = {}
    for r, names in zip(rows, mapped):
        heavy = [n for n in names if op_types[n] in HEAVY_OPS]
        node = (heavy or names or [None])[0]
        key = node if node is not None else f"({r['op']})"
        entry = out.setdefault(key, {"ms": 0.0, "op": op_types.get(node, r["op"]), "ran_as": []})
        entry["ms"] += float(r["ms"])
        if r["op"] not in entry["ran_as"]:
            entry["ran_as"].append(r["op"])
    return out


def by_op(table: dict[str, dict]) -> dict[str, dict]:
    """attribute()'s table summed per model op type."""
    out: dict[str, dict] = {}
    for entry in table.values():
        e = out.setdefault(entry["op"], {"ms": 0.0, "op": entry["op"], "ran_as": []})
        e["ms"] += entry["ms"]
        e["ran_as"] += [o for o in entry["ran_as"] if o not in e["ran_as"]]
    return out


def _ran_as(base: dict | None, win: dict | None) -> str:
    b = "+".join((base or {}).get("ran_as", [])) or "-"
    w = "+".join((win or {}).get("ran_as", [])) or "-"
    return b if b == w else f"{b} > {w}"


def _ratio(win_ms: float, base_ms: float) -> str:
    return f"{win_ms / base_ms:.2f}" if base_ms > 0 and win_ms > 0 else "gone" if base_ms > 0 else "new"


def profile_rows(base: dict[str, dict], win: dict[str, dict], limit: int) -> list[dict]:
    """The rows of the table: the `limit` keys the baseline spends most time in (then the winner's own, by its
    time), then one row for the rest, then the totals. Each: key, ran_as, base_ms, base_share, win_ms,
    win_share, ratio (winner ms / baseline ms)."""
    base_total = sum(e["ms"] for e in base.values())
    win_total = sum(e["ms"] for e in win.values())

    def row(key: str, b: float, w: float, ran_as: str) -> dict:
        return {"key": key, "ran_as": ran_as, "base_ms": b, "base_share": b / base_total if base_total else 0.0,
                "win_ms": w, "win_share": w / win_total if win_total else 0.0, "ratio": _ratio(w, b)}

    keys = sorted(set(base) | set(win), key=lambda k: (-(base.get(k) or {}).get("ms", 0.0),
                                                      -(win.get(k) or {}).get("ms", 0.0), k))
    shown, rest = keys[:limit], keys[limit:]
    rows = [row(k, (base.get(k) or {}).get("ms", 0.0), (win.get(k) or {}).get("ms", 0.0),
                _ran_as(base.get(k), win.get(k))) for k in shown]
    if rest:
        rows.append(row(f"({len(rest)} more)", sum((base.get(k) or {}).get("ms", 0.0) for k in rest),
                        sum((win.get(k) or {}).get("ms", 0.0) for k in rest), ""))
    rows.append(row("total", base_total, win_total, ""))
    return rows


def profile_lines(rows: list[dict], key_title: str) -> list[str]:
    width = min(max([len(key_title), *(len(r["key"]) for r in rows)]), 48)
    ran = min(max([26, *(len(r["ran_as"]) for r in rows)]), 48)
    lines = [f"{key_title:{width}s}  {'ran as (baseline > winner)':{ran}s} {'baseline ms':>11s} {'share':>6s} "
             f"{'winner ms':>10s} {'share':>6s} {'ratio':>6s}"]
    for r in rows:
        if r["key"] == "total":
            lines.append("-" * len(lines[0]))
        lines.append(f"{r['key'][:width]:{width}s}  {r['ran_as'][:ran]:{ran}s} {r['base_ms']:11.3f} "
                     f"{100 * r['base_share']:5.1f}% {r['win_ms']:10.3f} {100 * r['win_share']:5.1f}% {r['ratio']:>6s}")
    return lines
