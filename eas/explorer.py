"""Read-only access to stored studies for the Pareto explorer, and the tables it shows.

Everything here is a plain function over records (see eas.report), so the explorer's numbers
are the CLI's numbers and tests need no Streamlit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from eas.errors import UserError
from eas.objectives import OBJECTIVES
from eas.report import TrialRecord, knee, pareto_front, records_from_trials

# Filters the explorer offers: metric -> label. Sliders over these shrink the front live.
FILTER_METRICS = {"macs": "max MACs", "params": "max params", "latency_ms": "max latency (ms)",
                  "inference_energy_j_per_1k": "max energy (J/1k)"}


@dataclass(frozen=True)
class LoadedStudy:
    name: str
    url: str
    settings: dict
    reference: dict
    records: list[TrialRecord]

    @property
    def objectives(self) -> tuple[str, ...]:
        return tuple(self.settings["objectives"])


def storage_urls(storage: str | None = None) -> list[str]:
    """The given URL, or every SQLite study file under studies/ ($EAS_STUDIES_DIR)."""
    if storage:
        return [storage]
    folder = Path(os.environ.get("EAS_STUDIES_DIR", "studies"))
    return [f"sqlite:///{p}" for p in sorted(folder.glob("*.db"))]


def open_readonly(url: str):
    """An Optuna storage that never writes: no table creation, no migration, no heartbeat."""
    import warnings

    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from eas.storage import preflight, safe_url, sqlite_path

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    preflight(url, must_exist=True)
    if sqlite_path(url) is not None:
        engine_kwargs = {"connect_args": {"timeout": 30}}
    else:
        engine_kwargs = {"connect_args": {"options": "-c default_transaction_read_only=on"}}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, skip_table_creation=True,
                                          skip_compatibility_check=True)
    except (SQLAlchemyError, ImportError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"cannot open storage {safe_url(url)}: {first}") from None


def list_studies(storage: str | None = None) -> list[dict]:
    """One row per EAS study: name, space, data, trials, dates, and where it is stored."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from eas.search import SETTINGS_KEY
    from eas.storage import safe_url

    rows = []
    for url in storage_urls(storage):
        try:
            summaries = optuna.get_all_study_summaries(open_readonly(url), include_best_trial=False)
        except (UserError, SQLAlchemyError) as error:
            rows.append({"study": None, "storage": safe_url(url), "error": str(error).splitlines()[0]})
            continue
        for summary in summaries:
            settings = summary.user_attrs.get(SETTINGS_KEY)
            if settings is None:
                continue
            rows.append({
                "study": summary.study_name, "space": settings.get("space_name"), "data": settings.get("data"),
                "trials": summary.n_trials, "objectives": ", ".join(settings.get("objectives", [])),
                "started": summary.datetime_start.strftime("%Y-%m-%d %H:%M") if summary.datetime_start else "",
                "storage": safe_url(url), "url": url, "error": None,
            })
    return rows


def find_eas_study(name: str, storage):
    """The Optuna study `name` in `storage`, refused unless EAS made it (its settings are stored)."""
    import optuna

    from eas.search import SETTINGS_KEY

    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
        raise UserError(f"no study {name!r} in this storage (studies: {', '.join(known) or 'none'})") from None
    if SETTINGS_KEY not in study.user_attrs:
        raise UserError(f"study {name!r} is not an EAS study (or is still being created)")
    return study


def load_study(url: str, name: str) -> LoadedStudy:
    from eas.search import REFERENCE_KEY, SETTINGS_KEY

    study = find_eas_study(name, open_readonly(url))
    return LoadedStudy(name, url, study.user_attrs[SETTINGS_KEY], study.user_attrs.get(REFERENCE_KEY, {}),
                       records_from_trials(study.get_trials(deepcopy=False)))


def trial_rows(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[dict]:
    """Every trial with its state, Pareto membership and metrics: the data of every chart."""
    front = {r.number for r in pareto_front(records, objectives)}
    best = knee(pareto_front(records, objectives), objectives)
    rows = []
    for r in records:
        m = r.metrics
        rows.append({
            "trial": r.number, "state": r.state, "pareto": r.number in front,
            "knee": best is not None and r.number == best.number,
            "role": "knee" if best is not None and r.number == best.number else
                    "pareto" if r.number in front else r.state if r.state != "complete" else "dominated",
            "genome": r.genome or "", "accuracy": _num(m.get("accuracy")), "macs": _num(m.get("macs")),
            "params": _num(m.get("params")), "latency_ms": _num(m.get("latency_ms")),
            "inference_energy_j_per_1k": _num(m.get("inference_energy_j_per_1k")),
            "memory_bytes_inference": _num(m.get("memory_bytes_inference")),
            "train_energy_j": _num(m.get("train_energy_j")), "energy_source": m.get("energy_source", ""),
            "device": m.get("device", ""), "reason": r.reason or "",
        })
    return rows


def _num(value) -> float:
    return math.nan if value is None else float(value)


def filtered_front(records: list[TrialRecord], objectives: tuple[str, ...],
                   limits: dict[str, float]) -> list[TrialRecord]:
    """The Pareto set, keeping trials within every limit (metric -> maximum)."""
    return [r for r in pareto_front(records, objectives)
            if all(r.metrics.get(metric) is not None and r.metrics[metric] <= limit
                   for metric, limit in limits.items())]


def objective_label(name: str) -> str:
    objective = OBJECTIVES[name]
    arrow = "↑" if objective.direction == "maximize" else "↓"
    return f"{name} {arrow}" + (f" ({objective.unit})" if objective.unit else "")
