"""What EAS keeps in an Optuna study: attribute names, the search settings, the schema version.

Everything lives in Optuna's own tables (user attributes), so optuna-dashboard and plain Optuna
open an EAS study unchanged. The layout has a version: a study written by a newer EAS is
refused with a clear message instead of being misread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from eas.errors import UserError
from eas.objectives import Constraints, parse_objectives

# 1: the first EAS (no version attribute); 2: schema attribute, canonical genome keys, rungs.
SCHEMA_VERSION = 2

# Study user attributes. The settings are written last: a study without them is still being
# set up, and workers and readers wait for it.
SETTINGS = "eas.settings"
REFERENCE = "eas.reference_point"
CREATED_BY = "eas.created_by"
SCHEMA = "eas.schema"
VERIFICATION = "eas.verification"  # results of `eas verify`, newest last
VERIFY_RUN = "eas.verify.run."     # + a run key: one model trained by `eas verify` at one seed
# + a baseline name (mobilenet_v2@0.5:adapted): a hand-designed network trained as the search's
# candidates are, at its full fidelity (`eas search --baselines`): {"metrics", "started", "finished"}
BASELINE = "eas.baseline."
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


# The type each stored setting must have (anyone with access can write a shared study).
SETTING_TYPES = {"space_name": str, "space": dict, "data": str, "objectives": list, "constraints": dict,
                 "fidelity": dict, "sampler": str, "seed": int, "device": str, "meter": str, "warm_start": bool,
                 "population": int, "multi_fidelity": dict, "runtime": dict, "supernet": dict,
                 "evaluator": str, "test_split": dict}
EAGER_TORCH = {"name": "torch", "threads": None, "batch": 32}


def valid_verification(result) -> bool:
    """A stored `eas verify` result with every field its readers use, of the right type."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if not isinstance(result, dict) or not isinstance(result.get("members"), list):
        return False
    if not all(number(result.get(k)) for k in ("of", "steps", "factor", "seeds", "seconds", "held")):
        return False
    if result.get("kendall_tau") is not None and not number(result["kendall_tau"]):
        return False
    members_ok = all(isinstance(m, dict) and number(m.get("trial")) and number(m.get("search_accuracy"))
                     and number(m.get("verified_accuracy")) and isinstance(m.get("held_place"), bool)
                     and isinstance(m.get("genome"), str) and (m.get("seed_spread") is None or number(m["seed_spread"]))
                     for m in result["members"])
    return members_ok and _valid_baselines(result.get("baselines", []), result.get("comparison", {}), number)


def _valid_baselines(baselines, comparison, number) -> bool:
    """The baselines of a verification and what was concluded from them, as their readers use them."""
    def interval(value) -> bool:
        return isinstance(value, list) and len(value) == 2 and all(number(v) for v in value)

    if not isinstance(baselines, list) or not isinstance(comparison, dict):
        return False
    rows_ok = all(isinstance(b, dict) and isinstance(b.get("name"), str) and isinstance(b.get("family"), str)
                  and number(b.get("verified_accuracy")) and interval(b.get("verified_interval"))
                  and isinstance(b.get("costs"), dict) for b in baselines)
    if not rows_ok or not comparison:  # no conclusions are fine only where there are no baselines
        return rows_ok and not baselines
    summary, volumes = comparison.get("summary"), comparison.get("hypervolume")
    return (isinstance(summary, dict) and all(v is None or number(v) for v in summary.values())
            and isinstance(volumes, dict) and number(volumes.get("front"))
            and isinstance(volumes.get("families"), dict) and all(number(v) for v in volumes["families"].values())
            and isinstance(comparison.get("members"), list) and isinstance(comparison.get("baselines"), list)
            and all(isinstance(m, dict) and number(m.get("trial")) and all(
                m.get(at) is None or (isinstance(m[at], dict) and isinstance(m[at].get("baseline"), str)
                                      and number(m[at].get("gain")) and interval(m[at].get("interval")))
                for at in ("at_macs", "at_latency")) for m in comparison["members"])
            and all(isinstance(b, dict) and isinstance(b.get("baseline"), str) and all(
                b.get(k) is None or number(b[k]) for k in ("macs_ratio", "latency_ratio", "macs_trial",
                                                           "latency_trial")) for b in comparison["baselines"]))


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
    # Where latency and inference energy are measured (eas.measure.runtime.Runtime); a study
    # stored before runtimes were recorded timed eager torch.
    runtime: dict = field(default_factory=lambda: dict(EAGER_TORCH))
    # One-shot search (eas.nas.one_shot): {"path", "hash", "trust"} of the supernet every
    # candidate inherits its weights from; empty: candidates are trained.
    supernet: dict = field(default_factory=dict)
    # An evaluation given from Python instead of training (eas.search(evaluator=...)), by its
    # name, "python:<name>"; empty: candidates are trained. A worker cannot rebuild it.
    evaluator: str = ""
    # The test split claims are scored on (eas.data.datasets.Dataset.test_split): {"source",
    # "images", "fingerprint"}, recorded when the study is created; empty in studies created before.
    test_split: dict = field(default_factory=dict)

    # What must match when a study is resumed: anything that changes what a result means
    # (the seed fixes the train/validation split and each candidate's initialisation).
    MUST_MATCH = ("space", "data", "objectives", "constraints", "fidelity", "seed", "multi_fidelity", "runtime",
                  "supernet", "evaluator")

    def to_dict(self) -> dict:
        shape = list(self.input_shape) if self.input_shape else None
        return {**asdict(self), "objectives": list(self.objectives), "input_shape": shape}

    @classmethod
    def from_dict(cls, data: dict, name: str = "study") -> SearchSettings:
        """Settings as stored; anything malformed is a clear error, never a traceback."""
        try:
            if not isinstance(data, dict):
                raise TypeError(f"settings are {type(data).__name__}, not a mapping")
            for key, kind in SETTING_TYPES.items():
                if key in data and not isinstance(data[key], kind):
                    raise TypeError(f"{key} is {type(data[key]).__name__}")
            parse_objectives(data["objectives"])
            Constraints.from_dict(data["constraints"])
            shape = tuple(int(v) for v in data["input_shape"]) if data.get("input_shape") else None
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            if known.get("sampler") == "eas":  # studies stored before TPE became the default
                known["sampler"] = "evolution"
            return cls(**{**known, "objectives": tuple(data["objectives"]), "input_shape": shape,
                          "runtime": data.get("runtime") or dict(EAGER_TORCH)})
        except (KeyError, TypeError, ValueError, UserError) as error:
            raise UserError(f"study {name!r} has malformed EAS settings ({type(error).__name__}: "
                            f"{str(error)[:200]})") from None

    def mismatches(self, stored: SearchSettings) -> list[str]:
        def key(settings: SearchSettings, name: str):
            # a supernet is the same one when its hash is (its trust may have been measured since)
            return settings.supernet.get("hash") if name == "supernet" else getattr(settings, name)

        different = [k for k in self.MUST_MATCH if key(self, k) != key(stored, k)]
        return different + (["test split"] if self.test_split_differs(stored) else [])

    def test_split_differs(self, stored: SearchSettings) -> bool:
        """The data's test split is not the stored study's: its recorded fingerprint differs, or
        (a study created before splits were recorded) the data has no official test split and a
        seed other than 0, whose training and validation split the fixed test split has changed."""
        if stored.test_split:
            return bool(self.test_split) and self.test_split.get("fingerprint") != stored.test_split.get("fingerprint")
        return self.test_split.get("source") == "held out" and stored.seed != 0
