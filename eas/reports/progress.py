"""The live progress of a search: elapsed/budget, trial counts, the Pareto set (as `eas show`
counts it), hypervolume.

On a terminal it is one updating line; in a log (stderr not a terminal) it is one plain line
per finished trial instead of hundreds of carriage-return updates. The numbers come from the
search's LiveStudy, so a line costs the same at trial 10 as at trial 10,000.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from eas.lazy import lazy_import
from eas.units import format_duration

tqdm = lazy_import("tqdm")
logger = logging.getLogger("eas.progress")


def status_text(live) -> str:
    c = live.counts
    return (f"{c['complete']} done, {c['stopped']} stopped, {c['infeasible']} infeasible, {c['pruned']} cut, "
            f"{c['failed']} failed"
            + (f", {c['broken']} broken" if c["broken"] else "")
            + f" | Pareto set {len(live.pareto_set)} | HV {live.hypervolume:.3f}")


class LoggedProgress:
    """A search's progress for a library caller: one INFO line per finished trial on the
    `eas.progress` logger, the text the command line prints. Python shows it once logging shows
    INFO lines, e.g. after `eas.prepare_process()`; otherwise it stays quiet, as a library should."""

    def __init__(self):
        self.started = time.monotonic()

    def __call__(self, live, summary) -> None:
        if logger.isEnabledFor(logging.INFO):  # the status costs nothing when nobody reads it
            logger.info(f"[{format_duration(time.monotonic() - self.started)}] trial {summary.last_number} "
                        f"finished: {status_text(live)}")


class SearchProgress:
    def __init__(self, budget, enabled: bool = True, stream=None):
        self.budget, self.enabled = budget, enabled
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.postfix = "starting"
        self._stop = threading.Event()
        self._bar = None
        if enabled and self.stream.isatty():
            total = budget.seconds or budget.trials
            unit = "s" if budget.seconds else "trial"
            self._bar = tqdm.tqdm(total=total, unit=unit, file=self.stream, dynamic_ncols=True,
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

    def __call__(self, live, summary) -> None:
        if not self.enabled:
            return
        self.postfix = status_text(live)
        if self._bar is None:
            # the trial as the study numbers it (eas show --trial N), not this run's count
            print(f"[{format_duration(time.monotonic() - self.started)}] trial {summary.last_number} finished: "
                  f"{self.postfix}", file=self.stream, flush=True)
            return
        if not self.budget.seconds:
            self._bar.n = summary.trials
        self._show()

    def close(self) -> None:
        self._stop.set()
        if self._bar is not None:
            self._show()
            self._bar.close()
