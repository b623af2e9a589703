"""A live view of a study that a search is writing: trial counts, the Pareto front, its
hypervolume, and the index of evaluated genomes, updated from what changed since the last
refresh. The cost of a refresh follows the number of new trials and the size of the front,
never the size of the study, so the ten-thousandth trial is booked as fast as the tenth.
"""

from __future__ import annotations

from collections import Counter

from eas.arch.genome import Arch
from eas.pareto import hypervolume_of_points, pareto_mask
from eas.reports.front import feasible, minimised, pareto_front
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
        self.front: list[TrialRecord] = []  # the strict Pareto set: what rankings and the hypervolume use
        self.feasible: dict[int, TrialRecord] = {}  # every complete feasible trial, by number
        self._pareto_set: tuple[int, list[TrialRecord]] | None = None  # (len(feasible), the set) when computed
        self.any_feasible = False
        self.hypervolume = 0.0
        self.rung_results: dict[int, dict[int, dict]] = {}  # rung -> trial number -> rung record

    def refresh(self) -> list[TrialRecord]:
        changed = self.reader.poll()
        front_changed = False
        for record in changed:
            for results in self.rung_results.values():
                results.pop(record.number, None)
            # A failed trial's retry carries its rungs; a reused result is its source's, counted once.
            if record.state not in ("failed", "broken") and schema.CACHED_FROM not in record.attrs:
                for rung in record.attrs.get(schema.RUNGS) or []:
                    self.rung_results.setdefault(rung["rung"], {})[record.number] = rung
            previous = self.states.get(record.number)
            if previous is not None:
                self.counts[previous] -= 1
            self.states[record.number] = record.state
            self.counts[record.state] += 1
            if previous == record.state:
                continue
            reusable = record.state in ("complete", "infeasible") or record.metrics.get("status") == "stopped"
            if reusable and record.metrics:
                key = genome_key(record)
                if key is not None and schema.CACHED_FROM not in record.attrs:
                    self.evaluated.setdefault(key, record)
            if record.state == "complete" and record.metrics.get("status", "ok") == "ok":
                self.any_feasible = True
            if feasible([record], self.objectives):
                self.front.append(record)
                self.feasible[record.number] = record
                front_changed = True
            elif self.feasible.pop(record.number, None) is not None:
                self._pareto_set = None
        if front_changed:
            points = minimised(self.front, self.objectives)
            self.front = [r for r, keep in zip(self.front, pareto_mask(points), strict=True) if keep]
            normalised = minimised(self.front, self.objectives, self.reference)
            self.hypervolume = hypervolume_of_points(normalised)
        return changed

    @property
    def pareto_set(self) -> list[TrialRecord]:
        """The Pareto set as `eas show` and the explorer print it (accuracies within their 95%
        intervals tie: eas.reports.front.pareto_front), computed again only when a trial changed it."""
        if self._pareto_set is None or self._pareto_set[0] != len(self.feasible):
            self._pareto_set = (len(self.feasible), pareto_front(list(self.feasible.values()), self.objectives))
        return self._pareto_set[1]

    def known(self, key: str) -> TrialRecord | None:
        return self.evaluated.get(key)

    def results_at(self, rung: int, excluding: int | None = None, last: int | None = None) -> list[dict]:
        """Results stored at `rung`, oldest first; with `last`, only that many of the most recent."""
        results = self.rung_results.get(rung, {})
        numbers = [n for n in sorted(results) if n != excluding]
        return [results[n] for n in (numbers[-last:] if last else numbers)]

