"""Bounded depth everywhere EAS reads structure (issue 51): a space file or dict, a stored
attribute, a JSON file nested 100,000 deep is refused, or shown as broken, with one message,
never a RecursionError."""

import sqlite3

import optuna
import pytest
import yaml

import eas
from eas.arch.space import SPACES_DIR, space_from_definition
from eas.errors import UserError
from eas.jsonfile import MAX_DEPTH, read_json
from eas.study.reader import StudyReader, load_study

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_space_nested_too_deeply_is_refused_in_one_line(tmp_path):
    (tmp_path / "deep.yaml").write_text("stages: " + DEEP)
    with pytest.raises(UserError, match=f"deep.yaml: nested deeper than {MAX_DEPTH} levels"):
        eas.load_space(tmp_path / "deep.yaml")
    definition = yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text())
    nested = definition["stages"]
    for _ in range(10_000):
        nested = [nested]
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH} levels"):
        space_from_definition({**definition, "stages": nested})
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH} levels"):
        read_json(tmp_path / "deep.json")


def test_resolution_null_means_the_datas_own_size():
    definition = {**yaml.safe_load((SPACES_DIR / "mobile.yaml").read_text()), "resolution": None}
    space = space_from_definition(definition).for_task((1, 28, 28))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    arch = space.sample(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask())
    assert space.resolutions == [] and arch.stem.resolution == 0


def test_a_stored_attribute_nested_too_deeply_makes_its_trial_broken_and_a_worker_is_refused(tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    result = eas.search(space="tiny", data="digits", trials=3, study="d", warm_start=False, sampler="random",
                        evaluator=lambda arch: 0.5 + arch.stem.width / 100)
    path = tmp_path / "studies" / "d.db"
    with sqlite3.connect(path) as connection:
        first = connection.execute("SELECT min(trial_id) FROM trials").fetchone()[0]
        connection.execute("UPDATE trial_user_attributes SET value_json = ? WHERE trial_id = ? AND key = 'metrics'",
                           (DEEP, first))
    loaded = load_study(result.storage, "d")
    assert [r.state for r in loaded.records][0] == "broken"
    assert all(r.state == "complete" for r in loaded.records[1:])
    with pytest.raises(UserError, match=f"nest deeper than {MAX_DEPTH} levels .trial 0: metrics"):
        StudyReader(result.storage, "d").check_optuna_can_load()

