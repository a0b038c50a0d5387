"""How tune, status, the report and export say what an engine really ran: the precision its runtime
computes in (a trial's or the winner's `precision`, tuner.backends.base.engine_precision), and the winner
against each installed runtime's own defaults timed in the same selection (the winner's `vs_defaults`)."""
from __future__ import annotations

from ..search.record import Winner

# The runtimes' names as a user knows them.
RUNTIMES = {"onnxruntime": "ONNX Runtime", "onnxruntime-gpu": "ONNX Runtime (GPU)", "openvino": "OpenVINO",
            "tensorrt": "TensorRT"}
# A float type as the precision routes spell it.
FLOATS = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64"}
# Routes that quantize nothing: their "0 of N matrix ops quantized" goes without saying.
FLOAT_ROUTES = frozenset({"fp32", "fp16", "bf16", "tf32"})


def runtime_name(backend: str) -> str:
    return RUNTIMES.get(backend, backend)


def float_word(precision: dict | None) -> str | None:
    """What the float parts compute in ("bf16", "fp32"), or None where the runtime did not say."""
    inference = (precision or {}).get("inference")
    return FLOATS.get(inference, inference) if inference else None


def computed_text(precision: dict | None, route: str | None = None) -> str:
    """"computed as int8 + bf16 (OpenVINO INFERENCE_PRECISION_HINT bf16; 23 of 24 matrix ops quantized)";
    "" for a trial measured before engines said (or by a backend that cannot say). The count is left out
    for a float route (`route`) that quantized nothing, as expected."""
    floats = float_word(precision)
    if not floats:
        return ""
    quantized, in_float = int(precision.get("quantized_nodes") or 0), int(precision.get("float_nodes") or 0)
    parts = (list(precision.get("quantized") or ["quantized"]) if quantized else []) + [floats]
    counts = (f"{quantized} of {quantized + in_float} matrix ops quantized"
              if quantized + in_float and (quantized or route not in FLOAT_ROUTES) else "")
    why = "; ".join(x for x in (precision.get("source"), counts) if x)
    return f"computed as {' + '.join(parts)}" + (f" ({why})" if why else "")


def precision_text(config: dict | None, precision: dict | None) -> str:
    """"precision int8, computed as int8 + bf16 (...)": the route the config asked for, then what ran."""
    route = (config or {}).get("precision")
    computed = computed_text(precision, route)
    return f"precision {route}" + (f", {computed}" if computed else "")


def kept_layers(config: dict) -> list[str]:
    """The model's layers (node names) a config keeps in float: its per-layer lists, however the search encoded
    them (one boolean per node or group, or a ranking's top k)."""
    return sorted({n for v in config.values() if isinstance(v, list) for n in v})


def kept_in_float(count: int, precision: dict | None) -> str:
    """"3 nodes kept in float (bf16 here)": "float" is not float32 where the runtime computes its float in bf16."""
    floats = float_word(precision)
    return f"{count} nodes kept in float" + (f" ({floats} here)" if count and floats and floats != "fp32" else "")


def vs_defaults_text(winner: Winner) -> str:
    """"1.11x OpenVINO's defaults, 4.23x ONNX Runtime's (timed side by side)", closest runtime first; ""
    for a winner selected before selection timed the runtimes' defaults."""
    timed = sorted(((name, d) for name, d in winner.defaults.items() if d.speedup is not None),
                   key=lambda nd: nd[1].speedup)
    parts = []
    for i, (name, d) in enumerate(timed):
        notes = (["the winner is them"] if d.trial is not None and d.trial == winner.trial else []) + (
            [] if d.feasible else ["they fail the requirement"])
        parts.append(f"{d.speedup:.2f}x {runtime_name(name)}'s" + (" defaults" if i == 0 else "")
                     + (f" ({'; '.join(notes)})" if notes else ""))
    failed = [f"{runtime_name(name)}'s defaults did not build ({d.error})" for name, d in winner.defaults.items() if d.error]
    text = ", ".join(parts) + (" (timed side by side)" if parts else "")
    return "; ".join(x for x in [text, *failed] if x)


def deployed_text(deployed: dict | None, claimed: float | None = None) -> str:
    """"deployed alone: 1.03x the baseline [0.99-1.07] (winner 18.6 ms, baseline 19.1 ms, medians of 5 fresh
    processes each)", and, where the side-by-side claim differs beyond the noise, both figures; "" for none."""
    if not deployed:
        return ""
    text = (f"deployed alone: {deployed['speedup']:.2f}x the baseline [95% {deployed['speedup_low']:.2f}-"
            f"{deployed['speedup_high']:.2f}] ")
    if deployed.get("workload"):  # a workload of several sets: the weighted figure, then each set's
        sets = deployed["workload"]
        text += (f"(weighted over {len(sets)} sets of shapes: "
                 + ", ".join(f"{r['shapes']} {r['speedup']:.2f}x" for r in sets)
                 + f"; medians of {len(sets[0]['winner']['medians_ms'])} fresh processes each)")
    else:
        w, b = deployed["winner"], deployed["baseline"]
        text += (f"(winner {w['median_ms']:.2f} ms, baseline {b['median_ms']:.2f} ms, "
                 f"medians of {len(w['medians_ms'])} fresh processes each)")
    if claimed and not deployed.get("agrees", True):
        text += (f"; side by side it read {claimed:.2f}x: the two differ beyond the noise, and the deployed figure is "
                 "what a user running the engine alone sees")
    return text


def serving_text(spec) -> str:
    """"", or what a throughput study times (--throughput): ", throughput with 4 requests in flight"."""
    return f", throughput with {spec.in_flight} requests in flight" if (spec.in_flight or 1) > 1 else ""


def workload_lines(figures: list[dict] | None, indent: str = "  ") -> list[str]:
    """One line per set of a workload's shapes (search.record.ShapeFigure as stored): its share, speedup and
    milliseconds beside the baseline's; [] for a study of one set."""
    lines = []
    for f in figures or []:
        text = f"{indent}at {f['shapes']} ({100 * f['weight']:.0f}% of requests): "
        if f.get("ratio"):
            text += f"{1 / f['ratio']:.2f}x the baseline"
            if f.get("ci_low") and f.get("ci_high"):
                text += f" [95% {1 / f['ci_high']:.2f}-{1 / f['ci_low']:.2f}]"
            text += ", "
        text += f"{f['median_ms']:.2f} ms" + (f" against {f['baseline_ms']:.2f} ms" if f.get("baseline_ms") else "")
        lines.append(text)
    return lines


def not_deployed_lines(winner: Winner) -> list[str]:
    """One line per finalist that won side by side but ran slower than the baseline alone (not the winner)."""
    return [f"trial {n.trial} read {n.claimed_speedup:.2f}x the baseline side by side but "
            f"{n.deployed['speedup']:.2f}x [95% {n.deployed['speedup_low']:.2f}-{n.deployed['speedup_high']:.2f}] "
            "deployed alone: slower than the defaults it would replace, so not the winner"
            for n in winner.not_deployed if n.claimed_speedup]
