"""Energy meters. Every reading carries its source: 'nvml', 'rapl' or 'estimated'.

- nvml: the NVIDIA total-energy counter (mJ since driver load, Volta and newer); CUDA is
  synchronised before each read so the window covers the queued work. Updates every ~100 ms.
- rapl: /sys/class/powercap package counters (Intel, and AMD since Linux 5.8), microjoules,
  wrapping at max_energy_range_uj; only top-level domains are summed (sub-domains overlap).
- estimated: process CPU time x watts per core (+ GPU busy time x board power). Used only when
  no counter is readable, and then every figure says "estimated".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eas.errors import UserError
from eas.lazy import lazy_import

pynvml = lazy_import("pynvml")  # the nvml extra: absent, the NVML meter says so
torch = lazy_import("torch")  # meters are chosen before any model is built

# A busy server core draws a few watts (TDP / cores of current EPYC/Xeon parts is 3-5 W);
# codecarbon's fallback uses 4 W per thread. Override with EAS_WATTS_PER_CORE.
DEFAULT_WATTS_PER_CORE = 4.0
DEFAULT_GPU_WATTS = 300.0


class MeterError(UserError):
    pass


@dataclass(frozen=True)
class EnergyReading:
    joules: float
    seconds: float
    source: str
    note: str | None = None  # e.g. that other processes competed for the CPU meanwhile


def _machine_busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (/proc/stat), None where unavailable."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def contention_note(machine_busy: float | None, own_cpu: float, wall: float) -> str | None:
    """A note when other processes kept the cores busy during a measurement window."""
    if machine_busy is None or wall <= 0:
        return None
    cores = os.cpu_count() or 1
    others = max(0.0, machine_busy - own_cpu) / wall
    if others < 0.5 or machine_busy / (wall * cores) < 0.9:
        return None
    policy = os.environ.get("OMP_WAIT_POLICY", "default").upper()
    effect = ("passive OpenMP waiting keeps the CPU-time estimate close to an idle machine's" if policy == "PASSIVE"
              else f"OMP_WAIT_POLICY={policy}: busy-waiting threads may inflate this estimate")
    return f"machine oversubscribed: other processes used {others:.1f} of {cores} cores meanwhile; {effect}"


class Meter:
    """Measures the energy of a window of work: `start()`, then `stop(token)`."""

    source = "base"
    min_window_s = 0.0  # shortest window the counter resolves

    def start(self):
        raise NotImplementedError

    def stop(self, token) -> EnergyReading:
        raise NotImplementedError


class EstimatedMeter(Meter):
    source = "estimated"
    min_window_s = 0.05

    def __init__(self, watts_per_core: float | None = None, gpu_watts: float | None = None,
                 cuda: bool = False):
        self.watts_per_core = watts_per_core or float(os.environ.get("EAS_WATTS_PER_CORE", DEFAULT_WATTS_PER_CORE))
        self.gpu_watts = gpu_watts or float(os.environ.get("EAS_GPU_WATTS", DEFAULT_GPU_WATTS))
        self.cuda = cuda

    def start(self):
        _synchronize(self.cuda)
        return time.process_time(), time.perf_counter(), _machine_busy_seconds()

    def stop(self, token) -> EnergyReading:
        _synchronize(self.cuda)
        cpu0, wall0, busy0 = token
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        busy1 = _machine_busy_seconds()
        # Without a busy counter, a CUDA window is taken as fully busy: an upper estimate.
        joules = cpu * self.watts_per_core + (wall * self.gpu_watts if self.cuda else 0.0)
        note = contention_note(busy1 - busy0 if busy0 is not None and busy1 is not None else None, cpu, wall)
        return EnergyReading(joules, wall, self.source, note)


class RaplMeter(Meter):
    source = "rapl"
    min_window_s = 0.01

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root or os.environ.get("EAS_POWERCAP_ROOT", "/sys/class/powercap"))
        # Top-level package domains only ("intel-rapl:0", not "intel-rapl:0:0"): they overlap.
        self.domains = sorted(p for p in self.root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not self.domains:
            raise MeterError(f"no RAPL energy counters under {self.root}")
        self.ranges = []
        for domain in self.domains:
            self._read(domain / "energy_uj")
            self.ranges.append(self._read(domain / "max_energy_range_uj"))

    def _read(self, path: Path) -> int:
        try:
            return int(path.read_text())
        except PermissionError:
            raise MeterError(
                f"RAPL counter {path} is readable by root only (since Linux 5.10); run as root or "
                f"grant read access: sudo chmod o+r {self.root}/intel-rapl:*/energy_uj") from None

    def start(self):
        return [self._read(d / "energy_uj") for d in self.domains], time.perf_counter()

    def stop(self, token) -> EnergyReading:
        before, wall0 = token
        after = [self._read(d / "energy_uj") for d in self.domains]
        micro = sum(delta_with_wrap(b, a, r) for b, a, r in zip(before, after, self.ranges, strict=True))
        return EnergyReading(micro / 1e6, time.perf_counter() - wall0, self.source)


def delta_with_wrap(before: int, after: int, max_range: int) -> int:
    """Counter increase, assuming at most one wraparound at max_range."""
    return after - before if after >= before else after + max_range - before


class NvmlMeter(Meter):
    source = "nvml"
    min_window_s = 0.5  # the counter updates about every 100 ms: several updates per window

    def __init__(self, index: int | None = None):
        """`index`: NVML's GPU number; by default the GPU this process computes on (each
        data-parallel worker has its own), found by PCI address because CUDA's numbering
        (CUDA_VISIBLE_DEVICES, fastest first) need not be NVML's."""
        try:
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = (pynvml.nvmlDeviceGetHandleByIndex(index) if index is not None
                           else pynvml.nvmlDeviceGetHandleByPciBusId(_current_gpu_pci_address()))
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception as error:  # ImportError, NVMLError_*: no usable counter
            raise MeterError(f"NVML energy counter not available: {error}") from None

    def _millijoules(self) -> int:
        _synchronize(True)
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)

    def start(self):
        return self._millijoules(), time.perf_counter()

    def stop(self, token) -> EnergyReading:
        before, wall0 = token
        return EnergyReading((self._millijoules() - before) / 1e3, time.perf_counter() - wall0, self.source)


def _current_gpu_pci_address() -> str:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def _synchronize(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def shared_counter_note(source: str, neighbours: int) -> str | None:
    """RAPL counts a whole CPU package and NVML a whole GPU: with other workers on the same host,
    a reading holds their work too. Such a reading is flagged, never split by guesswork."""
    if source in ("rapl", "nvml") and neighbours > 0:
        return (f"shared: {neighbours} other worker(s) on this host ran during it, and the {source} "
                "counter measured their work too")
    return None


METERS: dict[str, Callable[[bool], Meter]] = {
    "nvml": lambda cuda: NvmlMeter(),
    "rapl": lambda cuda: RaplMeter(),
    "estimated": lambda cuda: EstimatedMeter(cuda=cuda),
}


def make_meter(name: str = "auto", cuda: bool = False) -> tuple[Meter, str | None]:
    """The meter to use and, when `auto` fell back to an estimate, the reason why."""
    if name != "auto":
        if name not in METERS:
            raise MeterError(f"unknown energy meter {name!r} (known: auto, {', '.join(METERS)})")
        return METERS[name](cuda), None
    reasons = []
    for candidate in (["nvml"] if cuda else []) + ["rapl"]:
        try:
            return METERS[candidate](cuda), None
        except MeterError as error:
            reasons.append(str(error))
    return EstimatedMeter(cuda=cuda), "; ".join(reasons)


def measure_repeated(meter: Meter, work: Callable[[], int],
                     min_seconds: float | None = None) -> tuple[EnergyReading, int]:
    """Repeat `work` (returning how many samples it processed) until the window is long enough
    for the meter's counter to resolve it; returns the reading and the samples processed."""
    window = max(min_seconds or 0.0, meter.min_window_s)
    token = meter.start()
    start, samples = time.perf_counter(), 0
    while True:
        samples += work()
        if time.perf_counter() - start >= window:
            break
    return meter.stop(token), samples
