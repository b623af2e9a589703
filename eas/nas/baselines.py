"""The retrained front against the hand-designed networks a user would otherwise take.

`eas verify --baselines mobilenet_v3_small@0.5,0.75,1.0` trains a family of reference networks at
width multipliers with the front's recipe, data and seeds, each both as published and adapted to
the data's input by the one rule the search spaces use (`Arch.adapted_to`: the earliest stride-2
steps become stride 1 until the last map is at least 3 pixels; `NAME:adapted`, its own family),
where the two differ; `compare` says what that shows, every gain against the stronger of the two:

- for each front member, the most accurate baseline that costs no more (in MACs, and in
  deployed latency), and the accuracy difference with its 95% interval (Newcombe's method for a
  difference of two proportions, from each side's Wilson interval over its pooled validation
  images; the seeds' spread is reported beside it);
- for each baseline, the cheapest member at least as accurate, and the cost ratio member /
  baseline (MACs and latency): what the same accuracy costs with the searched network;
- the hypervolume of the retrained front and of each family, in the study's objectives against
  its reference point.

Pure functions on plain rows: the CLI, `eas show` and the explorer show the same numbers.
"""

from __future__ import annotations

import math
import statistics

from eas.arch.bounds import check_buildable
from eas.arch.reference import ADAPTED, REFERENCES, baseline_arch, reference
from eas.errors import UserError
from eas.pareto import hypervolume_of_points, minimised_values

DEFAULT_MULTIPLIERS = (0.35, 0.5, 0.75, 1.0)
MAX_BASELINES = 64  # distinct networks one search or verification trains beside its candidates
COMPARED_COSTS = {"macs": "macs", "latency": "latency_ms"}  # "at equal ..." -> the row's cost field


def space_families(space) -> list[str]:
    """The reference families whose full-width network is a point of `space`: what its search
    competes with."""
    return [name for name in REFERENCES if space.params_of(reference(name)) is not None]


def parse_baselines(specs: list[str], space) -> list[str]:
    """Baseline names from `--baselines` values: `family@a,b,c` (a family at multipliers), `family`
    (at 0.35, 0.5, 0.75 and 1.0), `auto` (the families of the space), `none`. Unknown families and
    multipliers are a UserError; duplicates are dropped."""
    names: list[str] = []
    for spec in specs or ["auto"]:
        spec = spec.strip()
        if spec == "none":
            continue
        if spec == "auto":
            families = [f"{family}@{','.join(map(str, DEFAULT_MULTIPLIERS))}" for family in space_families(space)]
            names += parse_baselines(families, space) if families else []
            continue
        family, at, multipliers = spec.partition("@")
        for multiplier in (multipliers.split(",") if at else map(str, DEFAULT_MULTIPLIERS)):
            name = f"{family}@{multiplier.strip()}"
            reference(name)  # an unknown family or multiplier is refused here, in one line
            names.append(f"{family}@{float(multiplier)}")  # one name per network: 0.5, 0.50 and .5 are one
    names = list(dict.fromkeys(names))
    if len(names) > MAX_BASELINES:
        raise UserError(f"--baselines names {len(names)} networks; at most {MAX_BASELINES} (each is trained)")
    return names


def with_adapted(names: list[str], input_shape) -> list[str]:
    """Each published baseline and, where the input changes it, its adapted twin."""
    found = []
    for name in names:
        found.append(name)
        if baseline_arch(name + ADAPTED, input_shape) != baseline_arch(name, input_shape):
            found.append(name + ADAPTED)
    return found


def family_of(name: str) -> str:
    """`mobilenet_v2@0.5` -> mobilenet_v2; `mobilenet_v2@0.5:adapted` -> "mobilenet_v2 adapted"."""
    return name.partition("@")[0] + (" adapted" if name.endswith(ADAPTED) else "")


def check_baselines_fit(names: list[str], input_shape, num_classes: int, data: str) -> None:
    """Refuse, before anything trains, a baseline the study's data cannot be fed to."""
    for name in names:
        try:
            check_buildable(baseline_arch(name, input_shape), input_shape, num_classes)
        except UserError as error:
            raise UserError(f"baseline {name} does not fit data {data} "
                            f"({'x'.join(map(str, input_shape))}, {num_classes} classes): {error}") from None


def accuracy_gain(member: dict, baseline: dict) -> dict:
    """member - baseline verified accuracy, with Newcombe's 95% interval (hybrid score method)."""
    p1, (low1, high1) = member["verified_accuracy"], member["verified_interval"]
    p2, (low2, high2) = baseline["verified_accuracy"], baseline["verified_interval"]
    gain = p1 - p2
    return {"baseline": baseline["name"], "gain": gain,
            "interval": [gain - math.hypot(p1 - low1, high2 - p2), gain + math.hypot(high1 - p1, p2 - low2)]}


def _cost(row: dict, field: str) -> float:
    value = row["costs"].get(field)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def best_within(member: dict, baselines: list[dict], field: str) -> dict | None:
    """The most accurate baseline costing no more than `member` in `field` (None if none does)."""
    cost = _cost(member, field)
    cheaper = [b for b in baselines if _cost(b, field) <= cost]  # NaN never compares true
    return max(cheaper, key=lambda b: b["verified_accuracy"], default=None)


def cheapest_reaching(baseline: dict, members: list[dict], field: str) -> dict | None:
    """The member cheapest in `field` whose verified accuracy is at least the baseline's."""
    reaching = [m for m in members if m["verified_accuracy"] >= baseline["verified_accuracy"]
                and math.isfinite(_cost(m, field))]
    return min(reaching, key=lambda m: _cost(m, field), default=None)


def covers(member: dict, baseline: dict, field: str = "latency_ms") -> bool:
    """The member is as accurate as the baseline within the noise (the upper end of the gain's
    95% interval is not below zero) and costs no more in `field` (an unmeasured cost never does)."""
    return _cost(member, field) <= _cost(baseline, field) and accuracy_gain(member, baseline)["interval"][1] >= 0


def hypervolume_of_rows(rows: list[dict], objectives: tuple[str, ...], reference_point: dict) -> float:
    """Normalised hypervolume of verified models (accuracy replaced by the verified one); a model
    with a cost not measured (NaN) or beyond the reference point adds nothing."""
    metrics = [{**row["costs"], "accuracy": row["verified_accuracy"]} for row in rows]
    return hypervolume_of_points(minimised_values(metrics, objectives, reference_point))


def _best(rows: list[dict]) -> float:
    return max(row["verified_accuracy"] for row in rows)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def compare(members: list[dict], baselines: list[dict], objectives: tuple[str, ...], reference_point: dict) -> dict:
    """What the verified front and baselines show (see the module docstring)."""
    per_member = []
    for member in members:
        row = {"trial": member["trial"]}
        for name, field in COMPARED_COSTS.items():
            rival = best_within(member, baselines, field)
            row[f"at_{name}"] = accuracy_gain(member, rival) if rival else None
        per_member.append(row)
    per_baseline = []
    for baseline in baselines:
        row = {"baseline": baseline["name"]}
        for name, field in COMPARED_COSTS.items():
            match = cheapest_reaching(baseline, members, field)
            base = _cost(baseline, field)
            row[f"{name}_ratio"] = _cost(match, field) / base if match and base > 0 else None
            row[f"{name}_trial"] = match["trial"] if match else None
        per_baseline.append(row)
    families = sorted({b["family"] for b in baselines})
    volumes = {f: hypervolume_of_rows([b for b in baselines if b["family"] == f], objectives, reference_point)
               for f in families}
    front = hypervolume_of_rows(members, objectives, reference_point)
    best = max(volumes.values(), default=0.0)
    union = hypervolume_of_rows(baselines, objectives, reference_point)
    summary = {"hypervolume_ratio": front / best if best > 0 else None,
               "hypervolume_ratio_union": front / union if union > 0 else None,
               # the share of baselines some member matches within the noise at no more deployed latency
               "coverage": sum(any(covers(m, b) for m in members) for b in baselines) / len(baselines)
               if baselines else None,
               "best_gain": _best(members) - _best(baselines) if members and baselines else None}
    for name in COMPARED_COSTS:
        summary[f"gain_at_{name}"] = _median([r[f"at_{name}"]["gain"] for r in per_member if r[f"at_{name}"]])
        summary[f"{name}_ratio_at_accuracy"] = _median([r[f"{name}_ratio"] for r in per_baseline
                                                        if r[f"{name}_ratio"] is not None])
    return {"members": per_member, "baselines": per_baseline,
            "hypervolume": {"front": front, "families": volumes, "all_baselines": union}, "summary": summary}
