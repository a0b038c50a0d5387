"""Accuracy requirements: the one parser of `cos<=0.005,rel_l2<=0.01`, and what a set of metrics violates."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .accuracy import BUILTIN_METRICS, METRIC_FLOOR
from .metric_source import locate_metric

_REQ = re.compile(r"^\s*([A-Za-z_][\w.]*(?::[A-Za-z_]\w*)?)\s*<=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Bound:
    metric: str  # a built-in name or module:function
    limit: float

    def __str__(self) -> str:
        return f"{self.metric}<={self.limit:g}"


@dataclass(frozen=True)
class Requirement:
    """All bounds must hold. The first bound's metric is the study's error objective."""

    bounds: tuple[Bound, ...]

    @classmethod
    def parse(cls, text: str | list[str] | None, load_user_metrics: bool = True) -> Requirement:
        """Parse and check. A user metric's module is never imported here: its source is found and its
        function checked for the signature (outputs, refs, inputs) (measure.metric_source);
        load_user_metrics=False skips even that (reports read a stored requirement of another host)."""
        parts: list[str] = []
        for t in [text] if isinstance(text, str) else (text or []):
            parts += [p for p in re.split(r"[,;]|\band\b", t) if p.strip()]
        bounds = []
        for part in parts:
            m = _REQ.match(part)
            if not m:
                raise UserError(
                    f"requirement {part.strip()!r} does not parse; write METRIC<=LIMIT, e.g. cos<=0.005 "
                    f"(metrics: {', '.join(BUILTIN_METRICS)} or module:function)"
                )
            metric = m.group(1)
            if ":" not in metric and metric not in BUILTIN_METRICS:
                raise UserError(f"requirement {part.strip()!r}: unknown metric {metric!r}; known: {', '.join(BUILTIN_METRICS)}")
            if ":" in metric and load_user_metrics:
                locate_metric(metric)
            limit = float(m.group(2))
            if not np.isfinite(limit):  # 1e999: a bound nothing can miss, and no stored number reads back
                raise UserError(f"requirement {part.strip()!r}: the limit is not a finite number; give one like "
                                f"{metric}<=0.005")
            if limit < METRIC_FLOOR.get(metric, -float("inf")):
                raise UserError(f"requirement {part.strip()!r}: {metric} is an error of at least {METRIC_FLOOR[metric]:g} "
                                f"(0 is identical), so no engine can meet it; give a limit of 0 or more, e.g. {metric}<=0.005")
            bounds.append(Bound(metric, limit))
        return cls(tuple(bounds))

    def __str__(self) -> str:
        return ",".join(str(b) for b in self.bounds)

    @property
    def primary_metric(self) -> str:
        return self.bounds[0].metric if self.bounds else "cos"

    def user_metrics(self) -> list[str]:
        return [b.metric for b in self.bounds if ":" in b.metric]

    def violations(self, metrics: dict[str, float]) -> dict[str, float]:
        """Per bound, value - limit (feasible when every value <= 0), the Optuna constraint convention."""
        out = {}
        for b in self.bounds:
            v = metrics.get(b.metric, float("inf"))
            out[str(b)] = float(v - b.limit) if np.isfinite(v) else 1e30
        return out

    def holds(self, metrics: dict[str, float]) -> bool:
        return all(v <= 0 for v in self.violations(metrics).values())
