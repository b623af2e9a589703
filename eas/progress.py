"""A live progress line for searches: elapsed/budget, trial counts, Pareto size, hypervolume."""

from __future__ import annotations

import sys
import threading
import time

from eas.report import counts, hypervolume, pareto_front, records_from_trials


class SearchProgress:
    def __init__(self, budget, objectives, reference, enabled: bool = True):
        self.budget, self.objectives, self.reference = budget, objectives, reference
        self.enabled = enabled
        self.started = time.monotonic()
        self.postfix = "starting"
        self._stop = threading.Event()
        self._bar = None
        if enabled:
            from tqdm import tqdm

            total = budget.seconds or budget.trials
            unit = "s" if budget.seconds else "trial"
            self._bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True,
                             bar_format="{l_bar}{bar}| {elapsed}/{total_fmt}{unit} {postfix}"
                             if budget.seconds else None)
            if budget.seconds:
                threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._show()

    def _show(self) -> None:
        if self._bar is None:
            return
        if self.budget.seconds:
            self._bar.n = min(self.budget.seconds, round(time.monotonic() - self.started))
        self._bar.set_postfix_str(self.postfix, refresh=True)

    def __call__(self, study, summary) -> None:
        if not self.enabled:
            return
        records = records_from_trials(study.get_trials(deepcopy=False))
        c = counts(records)
        front = pareto_front(records, self.objectives)
        self.postfix = (f"{c['complete']} done, {c['failed']} failed, {c['infeasible']} infeasible, "
                        f"{c['pruned']} cut | front {len(front)} | HV "
                        f"{hypervolume(records, self.objectives, self.reference):.3f}")
        if not self.budget.seconds and self._bar is not None:
            self._bar.n = summary.trials
        self._show()

    def close(self) -> None:
        self._stop.set()
        if self._bar is not None:
            self._show()
            self._bar.close()
