"""A live view of a study that a search is writing: trial counts, the Pareto front, its
hypervolume, and the index of evaluated genomes, updated from what changed since the last
refresh. The cost of a refresh follows the number of new trials and the size of the front,
never the size of the study, so the ten-thousandth trial is booked as fast as the tenth.
"""

from __future__ import annotations

from collections import Counter

from eas.genome import Arch
from eas.report import feasible, hypervolume_of_points, minimised, pareto_mask, spent_energy_j
from eas.study import schema
from eas.study.reader import StudyReader
from eas.study.records import STATES, TrialRecord


def genome_key(record: TrialRecord) -> str | None:
    """The canonical hash stored with the trial, or computed from its genome (older studies)."""
    key = record.attrs.get(schema.GENOME_KEY)
    if isinstance(key, str):
        return key
    try:
        return Arch.decode(record.genome).canonical_hash() if record.genome else None
    except ValueError:
        return None


class LiveStudy:
    def __init__(self, reader: StudyReader, objectives: tuple[str, ...], reference: dict[str, float]):
        self.reader, self.objectives, self.reference = reader, objectives, reference
        self.states: dict[int, str] = {}
        self.counts: Counter = Counter(dict.fromkeys(STATES, 0))
        self.evaluated: dict[str, TrialRecord] = {}  # genome key -> a complete trial with metrics
        self.front: list[TrialRecord] = []
        self.any_feasible = False
        self.training_energy_j = 0.0  # spent by the search; reused results are not counted again
        self.hypervolume = 0.0

    def refresh(self) -> list[TrialRecord]:
        changed = self.reader.poll()
        front_changed = False
        for record in changed:
            previous = self.states.get(record.number)
            if previous is not None:
                self.counts[previous] -= 1
            self.states[record.number] = record.state
            self.counts[record.state] += 1
            if previous == record.state:
                continue
            if record.state in ("complete", "infeasible") and record.metrics:
                key = genome_key(record)
                if key is not None and schema.CACHED_FROM not in record.attrs:
                    self.evaluated.setdefault(key, record)
            if record.state in ("complete", "infeasible", "pruned", "failed"):
                self.training_energy_j += spent_energy_j(record)
            if record.state == "complete" and record.metrics.get("status", "ok") == "ok":
                self.any_feasible = True
            if feasible([record], self.objectives):
                self.front.append(record)
                front_changed = True
        if front_changed:
            points = minimised(self.front, self.objectives)
            self.front = [r for r, keep in zip(self.front, pareto_mask(points), strict=True) if keep]
            normalised = minimised(self.front, self.objectives, self.reference)
            self.hypervolume = hypervolume_of_points(normalised)
        return changed

    def known(self, key: str) -> TrialRecord | None:
        return self.evaluated.get(key)

