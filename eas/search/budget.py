"""When a search stops starting trials: a small dataclass (as Syne Tune's stopping criteria)."""

from __future__ import annotations

from dataclasses import dataclass

from eas.errors import UserError
from eas.units import parse_seconds

MAX_BUDGET_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class Budget:
    """When to stop starting trials: after `seconds` of wall time and/or `trials` trials."""

    seconds: float | None = None
    trials: int | None = None

    @classmethod
    def parse(cls, budget: str | None, trials: int | None) -> Budget:
        if budget is None and trials is None:
            raise UserError("give a --budget (e.g. 2h, 90m, 1h30m) and/or --trials N")
        if budget is not None and not budget.strip():
            raise UserError("--budget is empty: give a duration such as 2h, 90m or 1h30m")
        if trials is not None and not 1 <= trials <= 10_000_000:
            raise UserError(f"--trials must be 1..10,000,000 (got {trials})")
        seconds = parse_seconds(budget, "--budget") if budget else None
        if seconds is not None and seconds > MAX_BUDGET_SECONDS:
            raise UserError(f"--budget must be at most a year (got {budget[:40]!r})")
        return cls(seconds, trials)

    def split(self, workers: int) -> list[Budget]:
        """One budget per process so that together they run exactly `trials` trials."""
        if self.trials is None:
            return [self] * workers
        shares = [self.trials // workers + (i < self.trials % workers) for i in range(workers)]
        return [Budget(self.seconds, share) for share in shares if share]
