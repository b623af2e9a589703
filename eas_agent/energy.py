"""The agent's energy window: RAPL package counters where the target has them, else an estimate
from the agent's CPU time (watts per busy core), labelled "estimated" — never "measured"."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable

WATTS_PER_CORE = float(os.environ.get("EAS_WATTS_PER_CORE", "4.0"))


def _rapl_domains() -> list[str]:
    """Top-level package domains whose counters this process can read (sub-domains overlap)."""
    readable = []
    for domain in sorted(glob.glob("/sys/class/powercap/intel-rapl:[0-9]*")):
        if domain.count(":") == 1 and os.access(os.path.join(domain, "energy_uj"), os.R_OK):
            readable.append(domain)
    return readable


def _read_uj(domain: str, name: str = "energy_uj") -> int:
    with open(os.path.join(domain, name)) as counter:
        return int(counter.read())


def joules_of(work: Callable[[], int], min_seconds: float) -> tuple[float, float, int, str]:
    """Repeat `work` (returning samples done) for at least `min_seconds`:
    (joules, seconds, samples, source)."""
    domains = _rapl_domains()
    try:
        before = [_read_uj(d) for d in domains]
    except OSError:
        domains, before = [], []
    cpu, start, samples = time.process_time(), time.perf_counter(), 0
    while True:
        samples += work()
        if time.perf_counter() - start >= min_seconds:
            break
    seconds = time.perf_counter() - start
    if domains:
        joules = 0.0
        for domain, first in zip(domains, before, strict=True):
            delta = _read_uj(domain) - first
            joules += (delta if delta >= 0 else delta + _read_uj(domain, "max_energy_range_uj")) / 1e6
        return joules, seconds, samples, "rapl"
    return (time.process_time() - cpu) * WATTS_PER_CORE, seconds, samples, "estimated"
