"""What a search can be asked (`eas search` and `eas.search` take the same options under the same
names), with defaults, and the type and range of each, checked before anything is read or
written: the command line's parser types them already, a Python caller may give anything."""

from __future__ import annotations

import os
from functools import partial

from eas import arguments as a
from eas.arch.bounds import MAX_SIDE
from eas.errors import ArgumentTypeError

OPTIONS = dict(space="mobile", budget=None, trials=None, cpu_budget=None, data="fashion-mnist", resolution=None,
               strict=False, objectives="accuracy,macs,params,energy", max_macs=None, max_params=None,
               max_latency=None, max_memory=None, max_sram=None, max_flash=None, sampler="tpe", rungs=3, eta=3,
               rung_resolution=1.0, rung_bands=1, population=16, seed=0, study=None,
               storage=None, workers=1, device="auto", target=None, meter="auto", epochs=2.0, subset=9000,
               max_steps=None, batch_size=128, lr=3e-3, precision="auto", trial_timeout="10m", warm_start=True,
               queue=False, evaluator="", runtime="onnxruntime", runtime_threads=1, runtime_batch=32, predictor=None,
               supernet=None, baselines=None)
MAX_SEED = 2**32 - 1  # numpy's and torch's generators take seeds below 2**32


def _space(where: str, name: str, value) -> None:
    """A built-in space's name, a YAML file's path or a definition (dict); the CLI passes a Space."""
    if isinstance(value, dict) or type(value).__name__ == "Space":
        return
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(f"{where}: {name} must be a space's name, a YAML file's path or a definition (dict) "
                                f"(got {a.shown(value)})")
    a.path(where, name, value)


def _text_or_texts(where: str, name: str, value) -> None:
    """A comma-separated string or a list of strings (objectives, baselines)."""
    if isinstance(value, str):
        a.text(where, name, value)
    else:
        a.texts(where, name, value, empty=False)


def _optional_texts(where: str, name: str, value) -> None:
    if value is not None:
        _text_or_texts(where, name, value)


def _limit(where: str, name: str, value) -> None:
    """A limit as the command line writes it ("20M", "2MB", "5ms") or a plain number."""
    if value is not None and not isinstance(value, str):
        a.number(where, name, value, above=0)


CHECKS = {
    "space": _space, "data": a.text, "objectives": _text_or_texts, "sampler": a.text, "device": a.text,
    "meter": a.text, "precision": a.text, "trial_timeout": a.text, "runtime": a.text,
    "strict": a.flag, "warm_start": a.flag, "queue": a.flag,
    "budget": partial(a.text, optional=True), "cpu_budget": partial(a.text, optional=True),
    "study": partial(a.text, optional=True), "storage": partial(a.text, optional=True),
    "target": partial(a.text, optional=True), "evaluator": partial(a.text, empty=True),
    "trials": partial(a.whole, low=1, optional=True),
    "resolution": partial(a.whole, low=1, high=MAX_SIDE, optional=True),
    "rungs": partial(a.whole, low=1, high=6), "eta": partial(a.whole, low=2, high=10),
    "rung_bands": partial(a.whole, low=1, high=5), "population": partial(a.whole, low=2, high=10_000),
    "seed": partial(a.whole, low=0, high=MAX_SEED), "workers": partial(a.whole, low=1, high=256),
    "subset": partial(a.whole, low=2, optional=True), "max_steps": partial(a.whole, low=1, optional=True),
    "batch_size": partial(a.whole, low=2), "runtime_threads": partial(a.whole, low=1, high=256),
    "runtime_batch": partial(a.whole, low=2, high=4096),
    "rung_resolution": partial(a.number, low=0.5, high=1.0), "epochs": partial(a.number, above=0),
    "lr": partial(a.number, above=0),
    "predictor": partial(a.path, optional=True), "supernet": partial(a.path, optional=True),
    "baselines": _optional_texts,
    **dict.fromkeys(("max_macs", "max_params", "max_latency", "max_memory", "max_sram", "max_flash"), _limit),
}
assert set(CHECKS) == set(OPTIONS), "every option has its check"


def check_options(given: dict, where: str = "eas.search") -> None:
    """Unknown names and values of the wrong type or range, each in one line naming the option."""
    a.known_keywords(where, given, OPTIONS)
    for name, value in given.items():
        CHECKS[name](where, name, value)
