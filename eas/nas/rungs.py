"""Multi-fidelity rungs and the multi-objective successive-halving rule that decides who trains on.

A candidate trains in rungs: rung k ends after `steps[k]` optimiser steps in all (each rung
continues the previous rung's weights with a fresh warm-up + cosine schedule), and is then
validated (`val_images[k]` validation images; all of them at the top rung). A ladder may train
and validate its lower rungs on smaller images (`resolution`, a fraction of the input size, as
EcoNAS does): benchmarks/resolution_fidelity.py measured that 20 px ranks `mobile`'s networks
like 28 px does (Kendall tau +0.59, where 28 px against itself with another seed gives +0.31) for
0.57x the CPU. The network resizes its own input, so no weight depends on the size and the top
rung continues the same weights at full size (progressive resizing). After each rung
below the top, the candidate is ranked among every result stored at that rung, by every
worker, so far: by non-dominated rank on the study's objectives (accuracy at that rung, the
exact costs), ties broken by each point's hypervolume contribution within its front. It trains
on only when it is among the best ceil(n / eta) of the n results: asynchronous successive
halving in its stopping form (as Syne Tune's MOASHA), so no worker waits for another.
The first candidate at each rung always continues: a search shows a full-fidelity result early.
With cost bands (`bands` > 1), a candidate is ranked only among the rung's results in its own
band of MACs (quantiles of the results there: each band holds about 1/bands of them), so large
networks, which learn more slowly, compete with large ones instead of being stopped by small
ones that lead after a short training (issue 49).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from eas.errors import UserError
from eas.pareto import hypervolume_contributions, minimised_values, nondominated_ranks

# Below the top rung, a candidate is validated on a fixed subset (95% CI about +-3.5 points at
# 85%) and its BatchNorm statistics recalibrated on fewer images: there the result only ranks it
# among the others, and the time goes to training instead (the top rung uses everything).
LOW_RUNG_VAL_IMAGES = 500
# A result is ranked among the most recent results at its rung, at most this many: the same as
# "all of them" until a rung holds that many, and a cost per decision that stops growing with
# the study after that (ranking n results costs about n x front size hypervolume terms).
RANKING_WINDOW = 500
LOW_RUNG_RECALIBRATION = 256
# The smallest fraction of the input size a lower rung may train at: measured down to 0.5
# (14 px of 28: tau +0.48); below it nothing says the ranking holds.
MIN_RUNG_RESOLUTION = 0.5
MAX_RUNG_BANDS = 5


@dataclass(frozen=True)
class Ladder:
    steps: tuple[int, ...]  # cumulative optimiser steps at the end of each rung
    eta: int = 3
    resolution: float = 1.0  # the fraction of the input size the rungs below the top train at
    bands: int = 1  # cost bands a candidate is ranked within at each rung (1: among all results)

    @classmethod
    def make(cls, top_steps: int, rungs: int, eta: int, resolution: float = 1.0, bands: int = 1) -> Ladder:
        if not 1 <= rungs <= 6:
            raise UserError(f"--rungs must be 1..6 (got {rungs})")
        if not 2 <= eta <= 10:
            raise UserError(f"--eta must be 2..10 (got {eta})")
        resolution = check_rung_resolution(resolution, rungs)
        bands = check_rung_bands(bands, rungs)
        steps = [max(1, math.ceil(top_steps / eta ** (rungs - 1 - k))) for k in range(rungs)]
        if top_steps < eta ** (rungs - 1):
            raise UserError(f"{rungs} rungs with eta {eta} need a top fidelity of at least {eta ** (rungs - 1)} "
                            f"optimiser steps (it has {top_steps}); raise --epochs/--subset or use fewer --rungs")
        return cls(tuple(steps), eta, resolution, bands)

    @property
    def top(self) -> int:
        return len(self.steps) - 1

    def segment(self, rung: int, scale: float = 1.0) -> int:
        """Optimiser steps a candidate trains at `rung`, its batch being 1/scale of the study's
        (rungs count steps at the study's batch size, so every candidate sees as many images).
        At least one: a rung that rounds to nothing still trains, and never means "everything"."""
        done = round(self.steps[rung - 1] * scale) if rung else 0
        return max(1, round(self.steps[rung] * scale) - done)

    def val_images(self, rung: int) -> int | None:
        return None if rung == self.top else LOW_RUNG_VAL_IMAGES

    def recalibration_images(self, rung: int) -> int:
        return 1024 if rung == self.top else LOW_RUNG_RECALIBRATION

    def scale(self, rung: int) -> float:
        """The fraction of the input size `rung` trains and validates at."""
        return 1.0 if rung == self.top else self.resolution

    def to_dict(self) -> dict:
        # Written only when not the default: such a ladder is stored as before, so older studies resume.
        return {"steps": list(self.steps), "eta": self.eta,
                **({"resolution": self.resolution} if self.resolution != 1.0 else {}),
                **({"bands": self.bands} if self.bands != 1 else {})}

    @classmethod
    def from_dict(cls, data: dict) -> Ladder:
        steps = tuple(int(s) for s in data["steps"])
        return cls(steps, int(data["eta"]), check_rung_resolution(data.get("resolution", 1.0), len(steps)),
                   check_rung_bands(data.get("bands", 1), len(steps)))


def check_rung_resolution(resolution, rungs: int) -> float:
    """The fraction of the input size the rungs below the top train at, checked."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, float)) \
            or not MIN_RUNG_RESOLUTION <= resolution <= 1.0:  # NaN fails the range
        raise UserError(f"the rung resolution must be a fraction of the input size from {MIN_RUNG_RESOLUTION} "
                        f"to 1 (got {resolution!r})")
    if rungs == 1 and resolution != 1.0:
        raise UserError("the rung resolution is for the rungs below the top: it needs --rungs 2 or more")
    return float(resolution)


def check_rung_bands(bands, rungs: int) -> int:
    """The number of cost bands candidates are ranked within at each rung, checked."""
    if isinstance(bands, bool) or not isinstance(bands, int) or not 1 <= bands <= MAX_RUNG_BANDS:
        raise UserError(f"the rung bands must be a whole number from 1 to {MAX_RUNG_BANDS} (got {bands!r})")
    if rungs == 1 and bands != 1:
        raise UserError("rung bands rank candidates at the rungs below the top: they need --rungs 2 or more")
    return bands


def same_band(costs: list[float], index: int, bands: int) -> list[int]:
    """The positions of the results in the same cost band as `costs[index]`: bands are quantiles
    of the results by cost (ties kept in the results' order), so each holds about 1/bands of them.
    A missing cost (NaN) sorts last."""
    if bands <= 1 or len(costs) <= 1:
        return list(range(len(costs)))
    values = np.nan_to_num(np.asarray(costs, dtype=float), nan=np.inf)
    place = np.empty(len(values), dtype=int)
    place[np.argsort(values, kind="stable")] = np.arange(len(values))
    band = place * bands // len(values)
    return np.flatnonzero(band == band[index]).tolist()


def order(points: np.ndarray) -> np.ndarray:
    """Indices from best to worst: by non-dominated rank, then by hypervolume contribution."""
    everyone = np.arange(len(points))
    place = positions(points, everyone)
    return everyone[np.argsort([place[i] for i in everyone], kind="stable")]


def positions(points: np.ndarray, wanted) -> dict[int, int]:
    """Row -> its place in `order(points)`, for the `wanted` rows only. Hypervolume contributions
    (the costly part) are computed only within the fronts of the wanted rows."""
    ranks = nondominated_ranks(points)
    ahead = np.bincount(ranks, minlength=ranks.max() + 1 if len(ranks) else 0).cumsum()
    placed: dict[int, int] = {}
    for front in np.unique(ranks[list(wanted)]) if len(wanted) else []:
        members = np.flatnonzero(ranks == front)  # ascending: ties keep the rows' order, as lexsort
        # Rounded: equal contributions (duplicates, points outside the box) tie exactly, and
        # keep the rows' order, whatever the float noise of the computation.
        contribution = np.round(hypervolume_contributions(np.clip(points[members], None, 1.0)), 12)
        within = np.argsort(-contribution, kind="stable")
        before = ahead[front - 1] if front else 0
        placed.update({int(members[k]): int(before + place) for place, k in enumerate(within)})
    return {int(i): placed[int(i)] for i in wanted}


def rung_points(results: list[dict], objectives: tuple[str, ...], reference: dict[str, float]) -> np.ndarray:
    """Rung results as normalised minimisation points; a missing value ranks last."""
    return np.nan_to_num(minimised_values(results, objectives, reference), nan=np.inf)


def standings(rung_results: dict[int, dict[int, dict]], objectives: tuple[str, ...],
              reference: dict[str, float], only: set[int] | None = None,
              window: int | None = None) -> dict[int, tuple[int, float]]:
    """Trial number -> (highest rung it reached, the share of that rung's most recent `window`
    results (default RANKING_WINDOW) it ranks ahead of now), for every trial with a rung result,
    or `only` those. Ranked now, not at the trial's own decision: the first result at a rung
    ranked first of one, and would otherwise keep that standing however many better ones came
    after it."""
    window = window or RANKING_WINDOW
    highest: dict[int, int] = {}
    for rung in sorted(rung_results):
        highest.update(dict.fromkeys(rung_results[rung], rung))
    places: dict[int, tuple[int, float]] = {}
    for rung, results in rung_results.items():
        numbers = [number for number in results if highest[number] == rung and (only is None or number in only)]
        if not numbers:
            continue
        everyone = sorted(results)[-window:]
        everyone += [number for number in numbers if number not in set(everyone)]
        points = rung_points([results[number] for number in everyone], objectives, reference)
        row = {number: index for index, number in enumerate(everyone)}
        place = positions(points, [row[number] for number in numbers])
        places.update({number: (rung, 1.0 - place[row[number]] / len(everyone)) for number in numbers})
    return places


@dataclass(frozen=True)
class Decision:
    go_on: bool
    position: int  # 0 = best among the results at this rung
    results: int  # how many results the rung held, this one included
    keep: int  # how many of them train on

    def to_dict(self) -> dict:
        return asdict(self)


def decide(points: np.ndarray, index: int, eta: int) -> Decision:
    """Whether row `index` of the rung's normalised minimisation points trains on."""
    position = positions(points, [index])[index]
    keep = math.ceil(len(points) / eta)
    return Decision(position < keep, position, len(points), keep)
