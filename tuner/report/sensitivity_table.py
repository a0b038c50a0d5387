"""`tuner sensitivity --out PREFIX`: the sensitivity table as PREFIX.csv (one row per candidate, most
sensitive first) and PREFIX.json (the whole table)."""
from __future__ import annotations

import csv
import json

# The two error columns of a table, by its method (analysis.sensitivity): what error_only and error_all_but hold.
COLUMNS = {"builds": ("only it quantized", "all but it"),
           "activations": ("added to its output", "its output's")}
CSV_COLUMNS = {"builds": ("{metric}_only_quantized", "{metric}_all_but_quantized"),
               "activations": ("activation_error_added", "activation_error_all_quantized")}


def sensitivity_columns(method: str | None) -> tuple[str, str]:
    """The labels of a table's two error columns (a table from before methods were named: builds)."""
    return COLUMNS[method or "builds"]


def write_table(table: dict, prefix: str) -> list[str]:
    """PREFIX.csv and PREFIX.json; returns the paths."""
    csv_path, json_path = f"{prefix}.csv", f"{prefix}.json"
    only, all_but = (c.format(metric=table["metric"]) for c in CSV_COLUMNS[table.get("method") or "builds"])
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "candidate", "nodes", only, all_but, "fp32_time_share", "gain_ms"])
        for i, e in enumerate(table["entries"], 1):
            w.writerow([i, e["name"], len(e["nodes"]), f"{e['error_only']:.6g}", f"{e['error_all_but']:.6g}",
                        f"{e['latency_share']:.4f}", f"{e['gain_ms']:.3f}"])
    with open(json_path, "w") as f:
        json.dump(table, f, indent=1)
    return [csv_path, json_path]
