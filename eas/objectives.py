"""The registry of objectives (what a search optimises) and the hard constraints.

An objective names a metric of `eas.nas.candidate.Metrics`, a direction and a unit. Constraints are
upper limits on metrics; the cheap ones (MACs, params, memory, SRAM, flash, latency) are known
before any training, so an infeasible candidate costs milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from eas.errors import UserError
from eas.units import parse_bytes, parse_count, parse_seconds


@dataclass(frozen=True)
class Objective:
    name: str
    metric: str
    direction: str  # "maximize" | "minimize"
    unit: str
    description: str
    # An objective of one's own is measured from the architecture (no training): called with
    # (arch, input_shape, num_classes), it returns a finite number >= 0. Its reference point is
    # derived like the built-in costs': 1.1 x its value for the space's largest architecture.
    measure: Callable[[object, tuple, int], float] | None = field(default=None, compare=False, repr=False)


OBJECTIVES: dict[str, Objective] = {o.name: o for o in [
    Objective("accuracy", "accuracy", "maximize", "", "top-1 validation accuracy"),
    Objective("macs", "macs", "minimize", "MACs", "multiply-adds per inference"),
    Objective("params", "params", "minimize", "", "parameters"),
    Objective("energy", "inference_energy_j_per_1k", "minimize", "J/1k", "inference energy per 1000 samples"),
    Objective("latency", "latency_ms", "minimize", "ms", "median latency at batch 1"),
    Objective("memory", "memory_bytes_inference", "minimize", "B", "inference memory at batch 1"),
    Objective("sram", "sram_bytes", "minimize", "B", "microcontroller SRAM: the int8 activations' arena"),
    Objective("flash", "flash_bytes", "minimize", "B", "microcontroller flash: the int8 model file"),
    Objective("train_energy", "train_energy_j", "minimize", "J", "energy of the proxy training"),
]}
DEFAULT_OBJECTIVES = ("accuracy", "macs", "params", "energy")
BUILT_IN = frozenset(OBJECTIVES)


def register_objective(name: str, measure: Callable[[object, tuple, int], float], unit: str = "",
                       description: str = "") -> Objective:
    """Add an objective of your own: a cost to minimise, measured from the architecture before
    any training, e.g. `register_objective("depth", lambda arch, shape, classes: len(arch.stages))`.
    A process that reads or joins such a study registers it too: elsewhere the study's settings name
    an objective that process does not know, and it is refused in one line."""
    if not isinstance(name, str) or not name.isidentifier() or name in BUILT_IN:
        raise UserError(f"an objective of your own needs a new name made of letters, digits and _ (got {name!r})")
    if not callable(measure):
        raise UserError(f"objective {name!r}: measure must be a function (arch, input_shape, num_classes) -> number")
    objective = Objective(name, name, "minimize", unit, description or f"{name} (your own)", measure)
    OBJECTIVES[name] = objective
    return objective


def measured(objective: Objective, arch, input_shape: tuple, num_classes: int) -> float:
    """An objective of one's own, measured and checked: a finite number >= 0, or ValueError with why."""
    if objective.measure is None:
        raise ValueError(f"objective {objective.name} is measured by EAS itself, not from the architecture")
    value = objective.measure(arch, tuple(input_shape), num_classes)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"objective {objective.name} measured {str(value)[:40]!r}, not a finite number >= 0")
    return float(value)


def parse_objectives(text: str | list[str]) -> tuple[str, ...]:
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names:
        raise UserError(f"unknown objective {', '.join(unknown) or '(none)'} (known: {', '.join(OBJECTIVES)}; one of "
                        "your own is registered with eas.register_objective in each process that uses it)")
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
    max_sram: float | None = None
    max_flash: float | None = None

    METRICS = {"max_macs": "macs", "max_params": "params", "max_memory": "memory_bytes_inference",
               "max_latency_ms": "latency_ms", "max_sram": "sram_bytes", "max_flash": "flash_bytes"}
    COUNTED = ("max_macs", "max_params", "max_memory", "max_sram", "max_flash")  # known from the genome

    @classmethod
    def parse(cls, macs: str | None = None, params: str | None = None, memory: str | None = None,
              latency: str | None = None, sram: str | None = None, flash: str | None = None) -> Constraints:
        # Only None means no limit: an empty text is a limit written wrong, refused by its parser.
        return cls(
            max_macs=parse_count(macs, "--max-macs") if macs is not None else None,
            max_params=parse_count(params, "--max-params") if params is not None else None,
            max_memory=parse_bytes(memory, "--max-memory") if memory is not None else None,
            max_latency_ms=parse_seconds(latency, "--max-latency") * 1e3 if latency is not None else None,
            max_sram=parse_bytes(sram, "--max-sram") if sram is not None else None,
            max_flash=parse_bytes(flash, "--max-flash") if flash is not None else None,
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
