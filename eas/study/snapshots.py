"""A candidate's weights at the end of its last finished rung, kept while it trains on.

When a worker dies mid-rung, the heartbeat retries its trial on another worker; that retry
continues from these weights instead of training the finished rungs again. The weights live
in a table of EAS's own in the study's database (so workers on other machines find them;
Optuna and optuna-dashboard ignore it), one row per running trial, removed when the trial
ends. Only searches and workers write it; readers never touch it.
"""

from __future__ import annotations

from eas.lazy import lazy_import

safetensors_torch = lazy_import("safetensors.torch")
sa = lazy_import("sqlalchemy")

TABLE = "eas_rung_weights"


class Snapshots:
    def __init__(self, engine, study_name: str):
        self.engine, self.study_name = engine, study_name
        metadata = sa.MetaData()
        self.table = sa.Table(
            TABLE, metadata,
            sa.Column("study", sa.String(512), primary_key=True),
            sa.Column("trial", sa.Integer, primary_key=True),
            sa.Column("rung", sa.Integer, nullable=False),
            sa.Column("weights", sa.LargeBinary, nullable=False))
        try:
            metadata.create_all(engine, checkfirst=True)
        except sa.exc.SQLAlchemyError:  # another worker created it at the same instant
            metadata.create_all(engine, checkfirst=True)

    def _key(self, trial: int):
        return (self.table.c.study == self.study_name) & (self.table.c.trial == trial)

    def save(self, trial: int, rung: int, state_dict: dict) -> None:
        data = safetensors_torch.save({k: v.detach().cpu().contiguous() for k, v in state_dict.items()})
        with self.engine.begin() as connection:
            connection.execute(self.table.delete().where(self._key(trial)))
            connection.execute(self.table.insert().values(study=self.study_name, trial=trial, rung=rung,
                                                          weights=data))

    def load(self, trial: int) -> tuple[int, dict] | None:
        """(rung, weights) saved by `trial`, or None."""
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(self.table.c.rung, self.table.c.weights).where(self._key(trial))).first()
        if row is None:
            return None
        try:
            return row[0], safetensors_torch.load(bytes(row[1]))
        except Exception:  # a damaged row: train the rungs again rather than fail
            return None

    def drop(self, *trials: int) -> None:
        with self.engine.begin() as connection:
            for trial in trials:
                connection.execute(self.table.delete().where(self._key(trial)))
