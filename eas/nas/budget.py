"""When a search stops starting trials: a small dataclass (as Syne Tune's stopping criteria)."""

from __future__ import annotations

from dataclasses import dataclass

from eas.errors import UserError
from eas.units import parse_seconds

MAX_BUDGET_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class Budget:
    """When to stop starting trials: after `seconds` of wall time, `trials` trials and/or
    `cpu_seconds` of this process's CPU time (all its threads). A CPU budget holds on a shared
    machine: a process that other work slows down is given as much computing as on an idle one
    (benchmarks compare methods by it). Wall time cuts the trial in flight; CPU time only stops
    new trials from starting."""

    seconds: float | None = None
    trials: int | None = None
    cpu_seconds: float | None = None

    @classmethod
    def parse(cls, budget: str | None, trials: int | None, cpu_budget: str | None = None) -> Budget:
        if budget is None and trials is None and cpu_budget is None:
            raise UserError("give a --budget (e.g. 2h, 90m, 1h30m) and/or --trials N")
        for option, text in (("--budget", budget), ("--cpu-budget", cpu_budget)):
            if text is not None and not text.strip():
                raise UserError(f"{option} is empty: give a duration such as 2h, 90m or 1h30m")
        if trials is not None and not 1 <= trials <= 10_000_000:
            raise UserError(f"--trials must be 1..10,000,000 (got {trials})")
        seconds = parse_seconds(budget, "--budget") if budget else None
        cpu_seconds = parse_seconds(cpu_budget, "--cpu-budget") if cpu_budget else None
        for option, text, value in (("--budget", budget, seconds), ("--cpu-budget", cpu_budget, cpu_seconds)):
            if value is not None and value > MAX_BUDGET_SECONDS:
                raise UserError(f"{option} must be at most a year (got {text[:40]!r})")
        return cls(seconds, trials, cpu_seconds)

    def split(self, workers: int) -> list[Budget]:
        """One budget per process so that together they run exactly `trials` trials."""
        if self.trials is None:
            return [self] * workers
        shares = [self.trials // workers + (i < self.trials % workers) for i in range(workers)]
        return [Budget(self.seconds, share, self.cpu_seconds) for share in shares if share]
