"""The registry of objectives (what a search optimises) and the hard constraints.

An objective names a metric of `eas.search.candidate.Metrics`, a direction and a unit. Constraints are
upper limits on metrics; the cheap ones (MACs, params, memory, latency) are known before any
training, so an infeasible candidate costs milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from eas.errors import UserError
from eas.units import parse_bytes, parse_count, parse_seconds


@dataclass(frozen=True)
class Objective:
    name: str
    metric: str
    direction: str  # "maximize" | "minimize"
    unit: str
    description: str


OBJECTIVES: dict[str, Objective] = {o.name: o for o in [
    Objective("accuracy", "accuracy", "maximize", "", "top-1 validation accuracy"),
    Objective("macs", "macs", "minimize", "MACs", "multiply-adds per inference"),
    Objective("params", "params", "minimize", "", "parameters"),
    Objective("energy", "inference_energy_j_per_1k", "minimize", "J/1k", "inference energy per 1000 samples"),
    Objective("latency", "latency_ms", "minimize", "ms", "median latency at batch 1"),
    Objective("memory", "memory_bytes_inference", "minimize", "B", "inference memory at batch 1"),
    Objective("train_energy", "train_energy_j", "minimize", "J", "energy of the proxy training"),
]}
DEFAULT_OBJECTIVES = ("accuracy", "macs", "params", "energy")


def parse_objectives(text: str | list[str]) -> tuple[str, ...]:
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names:
        raise UserError(f"unknown objective {', '.join(unknown) or '(none)'} (known: {', '.join(OBJECTIVES)})")
    if len(set(names)) != len(names):
        raise UserError(f"objective listed twice: {','.join(names)}")
    return tuple(names)


@dataclass(frozen=True)
class Constraints:
    """Upper limits; None means unconstrained. Units: MACs, parameters, bytes, milliseconds."""

    max_macs: float | None = None
    max_params: float | None = None
    max_memory: float | None = None
    max_latency_ms: float | None = None

    METRICS = {"max_macs": "macs", "max_params": "params", "max_memory": "memory_bytes_inference",
               "max_latency_ms": "latency_ms"}

    @classmethod
    def parse(cls, macs: str | None = None, params: str | None = None, memory: str | None = None,
              latency: str | None = None) -> Constraints:
        return cls(
            max_macs=parse_count(macs, "--max-macs") if macs else None,
            max_params=parse_count(params, "--max-params") if params else None,
            max_memory=parse_bytes(memory, "--max-memory") if memory else None,
            max_latency_ms=parse_seconds(latency, "--max-latency") * 1e3 if latency else None,
        )

    def violations(self, metrics: dict) -> dict[str, float]:
        """Constraint name -> relative excess (> 0 means violated) for each limit that is set.

        Relative (value / limit - 1) so that constraints of different units compare. A metric
        that was not measured (None or NaN: the latency of a candidate already over its MACs
        limit) has no entry: it must not poison the limits that were checked."""
        result = {}
        for name, metric in self.METRICS.items():
            limit, value = getattr(self, name), metrics.get(metric)
            if limit is not None and isinstance(value, (int, float)) and math.isfinite(value):
                result[name] = value / limit - 1.0
        return result

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> Constraints:
        """Limits as stored in a study (untrusted): unknown names or non-numbers are refused."""
        if not isinstance(data, dict) or any(k not in cls.METRICS or isinstance(v, bool)
                                             or not isinstance(v, (int, float)) or not v > 0
                                             for k, v in data.items()):
            raise UserError(f"malformed constraints {str(data)[:80]!r} (known: {', '.join(cls.METRICS)})")
        return cls(**data)
