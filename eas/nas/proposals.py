"""Where candidates come from: the samplers a search can use, and the guard that keeps
proposals which break a counted limit out of the study.

ConstraintAwareSampler wraps any Optuna sampler. Before a trial exists, it draws a complete
proposal from the wrapped sampler and counts its MACs, parameters and memory from the genome
(microseconds, eas.arch.counting); a proposal over a limit is drawn again, so it is never trained,
never stored and never counted among the sampler's evaluations. This is rejection sampling
from the sampler's own distribution: every legal candidate keeps its chance, only illegal ones
are removed. After `tries` rejections in a row the last proposal goes through and is stored as
infeasible, so a space with almost nothing legal still makes progress (and says so); the
same happens after `seconds`, since a model-based sampler takes milliseconds per proposal.
Where the legal region is too small for rejection (under 1 M MACs, a few in 100,000 of
`mobile` at 28 px), the guard repairs the last proposal after `repair_after` refusals over a
limit or when its time is up, whichever comes first: one choice at a time, in random order, it
takes the value that lowers the worst counted excess most, until the proposal is legal. The
nearest legal candidate to where the sampler wanted to look, not a fair draw from the legal
region; only then.

A proposal evaluated before is not drawn again: TPE's proposal is the best of a few draws by its
own acquisition, so it repeats the same known candidate (measured: 200 redraws in 2 s, all the
same, on a 100-trial study). The guard tries that proposal's neighbours instead, one choice
changed at random, then two, ...: the nearest candidates not yet evaluated where the sampler
wanted to look.

The default proposer is Optuna's multivariate TPE with the constant liar (several workers
do not propose the same candidate): in a multi-fidelity search a candidate stopped at a lower
rung reaches it as a pruned trial, which TPE counts among the bad ones; the candidates that
reached the top rung, ranked by non-dominated sorting, are the good ones. Measured against the
alternative below in benchmarks/search_efficiency.py (README): TPE proposing into the rungs
reached plain NSGA-II's final hypervolume sooner and ended higher on every seed.

EvolutionSampler (`--sampler evolution`): multi-objective regularised evolution (as Syne
Tune's MOREA) that learns from every rung, not only from the few candidates that reached the
top. After a random warm-up it picks a parent by tournament among recent candidates, ranked by
the highest rung they reached and where they rank there now (among every result at that rung),
and mutates one or two of its choices.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.samplers import BaseSampler

from eas.nas.rungs import standings


def space_distributions(space) -> dict[str, CategoricalDistribution]:
    return {name: CategoricalDistribution(choices) for name, choices in space.parameters().items()}


def mutate(params: dict, distributions: dict, changes: int, rng) -> dict:
    """`params` with up to `changes` choices, picked at random, replaced by other choices."""
    names = list(distributions)
    moved = dict(params)
    for name in rng.choice(names, size=min(len(names), changes), replace=False):
        others = [c for c in distributions[name].choices if c != params[name]]
        if others:
            moved[name] = others[rng.integers(len(others))]
    return moved


class ConstraintAwareSampler(BaseSampler):
    """`refuse(params)` says why a complete proposal must not become a trial ("over max_macs",
    "evaluated before") or returns None to accept it."""

    def __init__(self, base: BaseSampler, distributions: dict, refuse: Callable[[dict], str | None],
                 tries: int = 5000, seconds: float = 2.0, seed: int | None = None,
                 excess: Callable[[dict], float] | None = None, repair_after: int = 500):
        self.base, self.distributions, self.refuse = base, distributions, refuse
        self.tries, self.seconds = tries, seconds
        self.excess, self.repair_after = excess, repair_after  # worst relative excess over a counted limit
        self.rng = np.random.default_rng(seed)
        self.refused: dict[str, int] = {}  # reason -> proposals refused before the trial proposed last
        self.proposed_for: int | None = None  # that trial's number

    def infer_relative_search_space(self, study, trial) -> dict:
        return dict(self.distributions)

    def _complete(self, study, trial) -> dict:
        space = self.base.infer_relative_search_space(study, trial)
        params = dict(self.base.sample_relative(study, trial, space)) if space else {}
        for name, distribution in self.distributions.items():
            if name not in params:
                params[name] = self.base.sample_independent(study, trial, name, distribution)
        return params

    def refusals_for(self, number: int) -> dict[str, int]:
        """What was refused on the way to trial `number`'s proposal. An enqueued or retried trial
        has fixed parameters: Optuna asks no proposal for it, so nothing was refused for it."""
        return dict(self.refused) if self.proposed_for == number else {}

    def sample_relative(self, study, trial, search_space) -> dict:
        self.refused, self.proposed_for = {}, trial.number
        give_up = time.monotonic() + self.seconds  # a model-based sampler takes ms per proposal
        known, neighbours = None, 0  # the sampler's proposal that was evaluated before, if any
        over, params, repaired = 0, {}, False  # proposals refused for a limit; the last proposal
        for _ in range(self.tries):
            # Rejection is not finding a legal proposal: after `repair_after` refusals, or when the
            # time is up (a busy machine counts more slowly, and must not lose the repair to it).
            stuck = over >= self.repair_after or time.monotonic() > give_up
            if known is None and over and stuck and not repaired and self.excess is not None:
                params, repaired = self._repaired(params), True
            elif known is None:
                params = self._complete(study, trial)
            else:  # widen the neighbourhood after trying each choice about twice
                params = mutate(known, self.distributions, 1 + neighbours // (2 * len(self.distributions)), self.rng)
                neighbours += 1
            reason = self.refuse(params)
            if reason is None:
                return params
            self.refused[reason] = self.refused.get(reason, 0) + 1
            over += reason.startswith("over ")
            if reason == "evaluated before" and known is None:
                known = params
            repair_pending = self.excess is not None and known is None and over and not repaired
            if time.monotonic() > give_up and not repair_pending:
                break
        return params

    def _repaired(self, params: dict) -> dict:
        """`params` moved, one choice at a time in random order, to the value that lowers the worst
        counted excess most, until none is left (or no single change lowers it)."""
        assert self.excess is not None
        best, worst = dict(params), self.excess(params)
        names = list(self.distributions)
        improved = True
        while worst > 0 and improved:
            improved = False
            for name in (names[i] for i in self.rng.permutation(len(names))):
                for choice in self.distributions[name].choices:
                    moved = {**best, name: choice}
                    excess = self.excess(moved)
                    if excess < worst:
                        best, worst, improved = moved, excess, True
                if worst <= 0:
                    break
        return best

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self.rng = np.random.default_rng()


class EvolutionSampler(BaseSampler):
    """`live` is the search's LiveStudy: its rung results rank the parents."""

    def __init__(self, distributions: dict, live, seed: int | None = None, warmup: int = 10, population: int = 48,
                 tournament: int = 4, explore: float = 0.15):
        self.distributions, self.live = distributions, live
        self.rng = np.random.default_rng(seed)
        self.warmup, self.population, self.tournament, self.explore = warmup, population, tournament, explore
        self._ranked_for: int | None = None
        self._ranked_cache: tuple[int, list] = (0, [])
        self._params: dict[int, dict] = {}  # trial number -> its parameters, read once

    def infer_relative_search_space(self, study, trial) -> dict:
        return dict(self.distributions)

    def _ranked(self, trial) -> tuple[int, list[tuple[int, tuple[int, float], dict]]]:
        """(how many candidates have a rung result, (number, standing, params) of the most recent
        `population` of them). Ranked once per new trial: the constraint guard asks again for
        every proposal it refuses. Parameters are read once per candidate, for the recent ones
        only: the storage work per trial does not grow with the study."""
        if self._ranked_for != trial.number:
            candidates = sorted(set().union(*self.live.rung_results.values()))
            # Parents are ranked among the rung's recent 4 x population results, not RANKING_WINDOW:
            # a tournament needs a fair comparison of recent candidates, and with four objectives
            # the hypervolume tie-breaks of 500 results take over half a second per trial.
            places = standings(self.live.rung_results, self.live.objectives, self.live.reference,
                               only=set(candidates[-self.population:]), window=4 * self.population)
            recent = []
            for number in sorted(places):
                if number not in self._params:
                    record = self.live.reader.records.get(number)
                    self._params[number] = self.live.reader.params(record) if record is not None else {}
                if set(self._params[number]) >= set(self.distributions):
                    recent.append((number, places[number], self._params[number]))
            self._ranked_for, self._ranked_cache = trial.number, (len(candidates), recent)
        return self._ranked_cache

    def sample_relative(self, study, trial, search_space) -> dict:
        known, recent = self._ranked(trial)
        if known < self.warmup or not recent or self.rng.random() < self.explore:
            return {}  # random: every choice drawn by sample_independent
        picks = self.rng.choice(len(recent), size=min(self.tournament, len(recent)), replace=False)
        parent = max((recent[i] for i in picks), key=lambda item: item[1])[2]
        child = {name: parent[name] for name in self.distributions}
        return mutate(child, self.distributions, 1 + int(self.rng.random() < 0.5), self.rng)

    def sample_independent(self, study, trial, param_name, param_distribution):
        choices = param_distribution.choices
        return choices[self.rng.integers(len(choices))]

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()


# Each maker takes (seed, population, distributions, the search's LiveStudy).
SAMPLERS: dict[str, Callable[..., BaseSampler]] = {
    "tpe": lambda seed, population, *_: optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True),
    "evolution": lambda seed, population, distributions, live: EvolutionSampler(distributions, live, seed=seed),
    "nsga2": lambda seed, population, *_: optuna.samplers.NSGAIISampler(seed=seed, population_size=population),
    "gp": lambda seed, population, *_: optuna.samplers.GPSampler(seed=seed),
    "random": lambda seed, population, *_: optuna.samplers.RandomSampler(seed=seed),
}
