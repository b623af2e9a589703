"""How far to trust a front: retrain its members longer, with another seed, and see whether
they keep their order and their place.

`verify` takes the K most accurate members of a study's Pareto set, trains each from scratch
for `factor` times the study's full-fidelity steps with a different seed (and again with more
seeds when asked), validates on the whole validation set, and reports: Kendall's tau between
the accuracies the search stored and the verified ones, the spread over seeds, and which
members are still on the Pareto set when their verified accuracies replace the stored ones.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace

from eas.arch.genome import Arch
from eas.errors import UserError
from eas.reports.front import pareto_front
from eas.reports.pareto import kendall_tau
from eas.search.candidate import Candidate, wilson_interval
from eas.search.loop import ladder_of
from eas.study.records import TrialRecord
from eas.study.schema import SearchSettings
from eas.training.proxy import Fidelity


def verify_front(loaded, task, top: int, factor: float, seeds: int, device: str = "auto",
                 on_result=None) -> dict:
    settings = SearchSettings.from_dict(loaded.settings, loaded.name)
    front = sorted(pareto_front(loaded.records, loaded.objectives), key=lambda r: -r.value("accuracy"))[:top]
    if len(front) < 1:
        raise UserError(f"study {loaded.name!r} has no complete, feasible trial to verify yet")
    study_fidelity = Fidelity(**settings.fidelity)
    steps = max(1, round(ladder_of(settings, task).steps[-1] * factor))
    started = time.time()
    rows = []
    for record in front:
        fidelity = replace(study_fidelity, **_training(record))
        runs = []
        for offset in range(1, seeds + 1):
            candidate = Candidate(Arch.decode(record.genome), task, fidelity, device, settings.seed + offset,
                                  settings.meter)
            candidate.train_segment(steps_at_batch(steps, study_fidelity.batch_size, fidelity.batch_size),
                                    recalibration_images=1024)
            runs.append(candidate.validate())
        row = verified_row(record, runs)
        rows.append(row)
        if on_result:
            on_result(row)
    held = _held(front, rows, loaded.objectives)
    for row in rows:
        row["held_place"] = row["trial"] in held
    tau = kendall_tau([r["search_accuracy"] for r in rows], [r["verified_accuracy"] for r in rows]) \
        if len(rows) >= 3 else math.nan
    return {"at": started, "steps": steps, "factor": factor, "seeds": seeds, "members": rows,
            "kendall_tau": None if not math.isfinite(tau) else float(tau),
            "held": sum(r["held_place"] for r in rows), "of": len(rows),
            "seconds": time.time() - started}


def steps_at_batch(steps: int, study_batch: int, batch: int) -> int:
    """The search counts steps at the study's batch size (every candidate sees as many images);
    a candidate that trains with another batch size takes proportionally more or fewer."""
    return max(1, round(steps * study_batch / batch))


def verified_row(record: TrialRecord, runs: list[dict]) -> dict:
    """One member's verification: the mean accuracy over its seeds with the 95% interval of all
    their validation images pooled (not the first seed's), and the spread between seeds."""
    accuracies = [run["accuracy"] for run in runs]
    images = sum(run["val_images"] for run in runs)
    correct = sum(round(run["accuracy"] * run["val_images"]) for run in runs)
    return {"trial": record.number, "genome": record.genome, "search_accuracy": record.value("accuracy"),
            "search_interval": [record.metrics.get("accuracy_low"), record.metrics.get("accuracy_high")],
            "verified_accuracy": statistics.fmean(accuracies),
            "verified_interval": list(wilson_interval(correct, images)),
            "seed_spread": (max(accuracies) - min(accuracies)) if len(runs) > 1 else None,
            "seeds": len(runs), "costs": {k: record.metrics.get(k) for k in ("macs", "params")}}


def _training(record: TrialRecord) -> dict:
    fidelity = record.metrics.get("fidelity") or {}
    return {k: fidelity[k] for k in ("lr", "weight_decay", "batch_size") if k in fidelity}


def _held(front: list[TrialRecord], rows: list[dict], objectives) -> set[int]:
    """Members still on the (tied) Pareto set of the verified members, with verified accuracies."""
    verified = []
    for record, row in zip(front, rows, strict=True):
        low, high = row["verified_interval"]
        metrics = {**record.metrics, "accuracy": row["verified_accuracy"], "accuracy_low": low,
                   "accuracy_high": high}
        verified.append(replace(record, metrics=metrics))
    return {r.number for r in pareto_front(verified, objectives)}
