"""The library's input contract (issue 51): every public function of `eas` checks its arguments at
the door and refuses bad ones with EAS's own error (a ValueError; a TypeError too for a wrong
type) in one line naming the argument, before anything is written or trained."""

import inspect

import numpy as np
import pytest

import eas
from eas.errors import ArgumentTypeError, UserError

GOOD = dict(space="tiny", data="digits")
NET = "mobilenet_v3_small@0.35"

# (function, call, the argument the refusal names, a TypeError too)
BAD_ARGUMENTS = [
    ("search", lambda: eas.search(**GOOD, trials="3"), "trials", True),
    ("search", lambda: eas.search(**GOOD, trials=1.5), "trials", True),
    ("search", lambda: eas.search(**GOOD, trials=True), "trials", True),
    ("search", lambda: eas.search(**GOOD, trials=0), "trials", False),
    ("search", lambda: eas.search(**GOOD, trials=1, rungs="x"), "rungs", True),
    ("search", lambda: eas.search(**GOOD, trials=1, seed=-1), "seed", False),
    ("search", lambda: eas.search(**GOOD, trials=1, seed=0.5), "seed", True),
    ("search", lambda: eas.search(**GOOD, trials=1, study=5), "study", True),
    ("search", lambda: eas.search(space=42, data="digits", trials=1), "space", True),
    ("search", lambda: eas.search(**GOOD, trials=1, objectives=None), "objectives", True),
    ("search", lambda: eas.search(**GOOD, trials=1, objectives="accuracy"[:0]), "objectives", False),
    ("search", lambda: eas.search(**GOOD, trials=1, constraints=[1, 2]), "constraints", True),
    ("search", lambda: eas.search(**GOOD, trials=1, constraints={"max_macs": -5}), "max_macs", False),
    ("search", lambda: eas.search(**GOOD, trials=1, storage=5), "storage", True),
    ("search", lambda: eas.search(**GOOD, trials=1, on_trial=5), "on_trial", True),
    ("search", lambda: eas.search(**GOOD, trials=1, evaluator="x"), "evaluator", True),
    ("search", lambda: eas.search(**GOOD, trials=1, epochs=float("nan")), "epochs", False),
    ("search", lambda: eas.search(**GOOD, trials=1, warm_start=1), "warm_start", True),
    ("search", lambda: eas.search(**GOOD, trials=1, frobnicate=1), "frobnicate", True),
    ("search", lambda: eas.search(space="tiny", data=7, trials=1), "data", True),
    ("open_study", lambda: eas.open_study(5), "study", True),
    ("open_study", lambda: eas.open_study("s", storage=5), "storage", True),
    ("evaluate", lambda: eas.evaluate(5), "genome", True),
    ("evaluate", lambda: eas.evaluate(NET, epochs=0), "epochs", False),
    ("evaluate", lambda: eas.evaluate(NET, seed=True), "seed", True),
    ("evaluate", lambda: eas.evaluate(NET, constraints="20M"), "constraints", True),
    ("export", lambda: eas.export("s", out=None), "out", True),
    ("export", lambda: eas.export(5, out="x"), "study", True),
    ("export", lambda: eas.export("s", out="x", pick="best"), "pick", False),
    ("export", lambda: eas.export("s", out="x", trial=-1), "trial", False),
    ("export", lambda: eas.export("s", out="x", formats="pte"), "formats", True),
    ("export", lambda: eas.export("s", out="x", force="yes"), "force", True),
    ("train", lambda: eas.train(5), "folder", True),
    ("train", lambda: eas.train("x", frobnicate=1), "frobnicate", True),
    ("train", lambda: eas.train("x", epochs=0), "epochs", False),
    ("train", lambda: eas.train("x", lr="fast"), "lr", True),
    ("train", lambda: eas.train("x", target=2.0), "target", False),
    ("register_objective", lambda: eas.register_objective(5, len), "name", False),
    ("register_objective", lambda: eas.register_objective("depth_of_it", 5), "measure", False),
    ("load_space", lambda: eas.load_space(42), "name_or_path", True),
    ("load_space", lambda: eas.load_space("tiny", "x"), "input_shape", False),
    ("build", lambda: eas.build(5), "arch", True),
    ("build", lambda: eas.build(eas.reference(NET), (1, 0, 8)), "input shape", False),
    ("build", lambda: eas.build(eas.reference(NET), (1, 8, 8), "x"), "number of classes", False),
    ("profile", lambda: eas.profile(5, (1, 8, 8)), "model", True),
    ("profile", lambda: eas.profile(eas.build(eas.reference(NET), (1, 8, 8), 10), 5), "input_shape", False),
    ("profile", lambda: eas.profile(eas.build(eas.reference(NET), (1, 8, 8), 10), (1, 8, 8), True), "batch_size",
     True),
    ("reference", lambda: eas.reference(5), "name", True),
    ("reference", lambda: eas.reference("resnet@1"), "resnet", False),
    ("Arch", lambda: eas.Arch.decode(5), "genome", False),
]
# Public names that take no argument, and the error types themselves.
NO_ARGUMENTS = {"prepare_process", "list_spaces"}
NOT_CALLED = {"UserError", "GenomeError", "SearchResult", "Profile"}


@pytest.fixture
def studies(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("function, call, argument, wrong_type", BAD_ARGUMENTS,
                         ids=[f"{row[0]}-{i}" for i, row in enumerate(BAD_ARGUMENTS)])
def test_a_bad_argument_is_refused_at_the_door_in_one_line(studies, function, call, argument, wrong_type):
    with pytest.raises(ValueError) as refused:
        call()
    error = refused.value
    assert isinstance(error, UserError) and "\n" not in str(error)
    assert argument in str(error)
    assert isinstance(error, TypeError) == wrong_type, str(error)
    assert list(studies.rglob("*")) == [], "something was written before the refusal"


def test_every_public_function_is_in_the_table():
    checked = {row[0] for row in BAD_ARGUMENTS}
    public = {name for name in eas.__all__ if callable(getattr(eas, name))}
    assert public - NOT_CALLED - NO_ARGUMENTS == checked
    for name in NO_ARGUMENTS:
        assert not inspect.signature(getattr(eas, name)).parameters


def broadcast(shape, value=0):
    """A huge array that takes no memory (every element is the same one)."""
    return np.broadcast_to(np.array(value, dtype=np.uint8), shape)


BAD_DATA = [
    ((np.full((20, 8, 8), np.nan), np.arange(20) % 2), "finite"),
    ((np.zeros((20, 8, 8)), np.zeros(20, dtype=int)), "two classes"),
    ((np.zeros((20, 8, 8)), np.arange(19) % 2), "shape"),
    (([[1, 2], [3]], [0, 1]), "one array"),
    ((np.zeros((20, 8, 8)), 3), "shape"),
    ((np.zeros((20, 0, 0)), np.arange(20) % 2), "image shape"),
    ((np.zeros((5, 8, 8)), np.arange(5) % 2), "at least 10 samples"),
    ((np.zeros((20, 8, 8)), np.arange(20) % 2 + 0.5), "whole numbers"),
    ((np.zeros((20, 8, 8), dtype=object), np.arange(20) % 2), "numbers"),
    ((broadcast((400, 3, 4096, 4096)), broadcast((400,))), "GiB of images"),
]


@pytest.mark.parametrize("data, fragment", BAD_DATA, ids=[f"data-{i}" for i in range(len(BAD_DATA))])
def test_refused_arrays_leave_nothing_behind(studies, data, fragment):
    for call in (lambda: eas.search(space="tiny", data=data, trials=1), lambda: eas.evaluate(NET, data=data)):
        with pytest.raises(ValueError, match=fragment) as refused:
            call()
        assert isinstance(refused.value, UserError) and "\n" not in str(refused.value)
        assert list(studies.rglob("*")) == []


def test_the_error_types_are_valueerrors_and_a_wrong_type_a_typeerror_too():
    assert issubclass(UserError, ValueError) and issubclass(ArgumentTypeError, TypeError)
    assert issubclass(eas.GenomeError, ValueError)
