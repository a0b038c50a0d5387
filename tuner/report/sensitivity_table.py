"""`tuner sensitivity --out PREFIX`: the sensitivity table as PREFIX.csv (one row per candidate, most
sensitive first) and PREFIX.json (the whole table)."""
from __future__ import annotations

import csv
import json


def write_table(table: dict, prefix: str) -> list[str]:
    """PREFIX.csv and PREFIX.json; returns the paths."""
    csv_path, json_path = f"{prefix}.csv", f"{prefix}.json"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "candidate", "nodes", f"{table['metric']}_only_quantized",
                    f"{table['metric']}_all_but_quantized", "fp32_time_share", "gain_ms"])
        for i, e in enumerate(table["entries"], 1):
            w.writerow([i, e["name"], len(e["nodes"]), f"{e['error_only']:.6g}", f"{e['error_all_but']:.6g}",
                        f"{e['latency_share']:.4f}", f"{e['gain_ms']:.3f}"])
    with open(json_path, "w") as f:
        json.dump(table, f, indent=1)
    return [csv_path, json_path]
