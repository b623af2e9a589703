"""What EAS keeps in an Optuna study: attribute names, the search settings, the schema version.

Everything lives in Optuna's own tables (user attributes), so optuna-dashboard and plain Optuna
open an EAS study unchanged. The layout has a version: a study written by a newer EAS is
refused with a clear message instead of being misread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from eas.errors import UserError

# 1: the first EAS (no version attribute); 2: schema attribute, canonical genome keys, rungs.
SCHEMA_VERSION = 2

# Study user attributes. The settings are written last: a study without them is still being
# set up, and workers and readers wait for it.
SETTINGS = "eas.settings"
REFERENCE = "eas.reference_point"
CREATED_BY = "eas.created_by"
SCHEMA = "eas.schema"
VERIFICATION = "eas.verification"  # results of `eas verify`, newest last
# The worker pool (eas.study.queue): one attribute per kind of writer.
RUN_BUDGET = "eas.run.budget"        # {"seconds", "trials", "priority"}: eas search / eas resume
RUN_STARTED = "eas.run.started"      # POSIX time of the first start: the first worker
RUN_STOPPED = "eas.run.stopped_at"   # POSIX time of `eas stop`; null when running or resumed
RUN_KEYS = (RUN_BUDGET, RUN_STARTED, RUN_STOPPED)

# Trial user attributes.
GENOME = "genome"            # the genome string as sampled
GENOME_KEY = "genome_key"    # canonical hash: equal for genomes that build the same network
METRICS = "metrics"          # every measured number, with its sources
STATUS = "status"            # ok | infeasible | diverged | cut | error | interrupted | stopped
REASON = "reason"
WORKER = "worker"            # host:pid
CACHED_FROM = "cached_from"  # trial number whose result was reused for the same genome
WARM_START = "warm_start"    # name of the reference architecture queued first
RUNGS = "rungs"              # metrics at each multi-fidelity rung

TRIAL_KEYS = (GENOME, GENOME_KEY, METRICS, STATUS, REASON, WORKER, CACHED_FROM, WARM_START, RUNGS)


def check_schema(stored: object, name: str) -> int:
    """The stored layout version (1 when absent); a newer one than this EAS knows is refused."""
    version = 1 if stored is None else stored
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"study {name!r} has an unreadable EAS schema version {stored!r}")
    if version > SCHEMA_VERSION:
        raise UserError(f"study {name!r} was written by a newer EAS (schema {version}; this EAS reads up to "
                        f"{SCHEMA_VERSION}): upgrade EAS to read it")
    return version


@dataclass(frozen=True)
class SearchSettings:
    """Everything a worker needs to join a study, stored in the study itself."""

    space_name: str
    space: dict  # the full space definition, so workers elsewhere need no file
    data: str
    objectives: tuple[str, ...]
    constraints: dict
    fidelity: dict
    sampler: str = "tpe"
    seed: int = 0
    device: str = "auto"
    meter: str = "auto"
    warm_start: bool = True
    population: int = 16
    input_shape: tuple[int, int, int] | None = None  # of the task, for export and the explorer
    num_classes: int | None = None
    multi_fidelity: dict = field(default_factory=dict)  # empty: every candidate at `fidelity`

    # What must match when a study is resumed: anything that changes what a result means
    # (the seed fixes the train/validation split and each candidate's initialisation).
    MUST_MATCH = ("space", "data", "objectives", "constraints", "fidelity", "seed", "multi_fidelity")

    def to_dict(self) -> dict:
        shape = list(self.input_shape) if self.input_shape else None
        return {**asdict(self), "objectives": list(self.objectives), "input_shape": shape}

    @classmethod
    def from_dict(cls, data: dict, name: str = "study") -> SearchSettings:
        """Settings as stored; anything malformed is a clear error, never a traceback."""
        try:
            shape = tuple(int(v) for v in data["input_shape"]) if data.get("input_shape") else None
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            if known.get("sampler") == "eas":  # studies stored before TPE became the default
                known["sampler"] = "evolution"
            return cls(**{**known, "objectives": tuple(data["objectives"]), "input_shape": shape})
        except (KeyError, TypeError, ValueError) as error:
            raise UserError(f"study {name!r} has malformed EAS settings ({type(error).__name__}: {error})") from None

    def mismatches(self, stored: SearchSettings) -> list[str]:
        return [k for k in self.MUST_MATCH if getattr(self, k) != getattr(stored, k)]
