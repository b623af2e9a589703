"""EAS as a library: `eas.search()` and friends from Python, with a cheap evaluator injected so
that the search itself (proposals, limits, storage, resume, front) runs in seconds."""

import json
import math
import os
import signal
import subprocess
import sys

import numpy as np
import optuna
import pytest

import eas
from eas.errors import UserError
from eas.nas import session
from eas.reports.front import front_document
from eas.study.reader import load_study

FAST = dict(space="tiny", data="digits", objectives=["accuracy", "macs", "params"], warm_start=False)


def by_width(arch) -> float:
    """A made-up accuracy that grows with the network's width: cheap, deterministic."""
    return min(0.99, 0.5 + arch.stem.width / 64 + len(arch.stages) / 20)


@pytest.fixture
def studies(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    return tmp_path / "studies"


def test_a_search_from_python_returns_its_front_knee_and_study(studies):
    result = eas.search(**FAST, trials=6, study="py", evaluator=by_width, constraints={"max_macs": "400k"})
    assert result.study == "py" and result.stopped == "trials" and len(result.records) == 6
    assert result.storage == f"sqlite:///{(studies / 'py.db').resolve()}" or result.storage.endswith("py.db")
    assert all(r.metrics["macs"] <= 400_000 for r in result.records)  # the counted limit held
    stored = load_study(result.storage, "py")
    document = front_document(stored.records, stored.objectives, stored.reference)
    assert [t.number for t in result.front] == [row["trial"] for row in document["pareto"]]
    assert result.knee.number == document["knee"] and result.hypervolume == pytest.approx(document["hypervolume"])
    again = eas.search(**FAST, trials=2, study="py", evaluator=by_width, constraints={"max_macs": "400k"})
    assert len(again.records) == 8 and again.trials_this_run == 2  # the same name and settings resume it
    assert eas.open_study("py").knee.number == again.knee.number


def test_a_search_under_one_million_macs_finds_mobile_networks_below_it(studies):
    # At 28 px the mobile space's stride choices reach 0.25 M MACs; so few of its networks are
    # under 1 M that the guard repairs proposals instead of waiting for a legal draw.
    result = eas.search(**{**FAST, "space": "mobile", "data": "fashion-mnist"}, trials=4, study="m1",
                        evaluator=by_width, constraints={"max_macs": "1M"})
    assert [r.state for r in result.records] == ["complete"] * 4
    assert all(r.metrics["macs"] <= 1_000_000 and r.metrics["status"] == "ok" for r in result.records)


def by_stem(arch) -> float:
    """A made-up accuracy from the stem's width: MobileNetV3-Small@0.35's 8 channels give 0.6."""
    return 0.5 + min(0.4, arch.stem.width / 80)


def test_baselines_are_trained_first_beside_the_trials_and_the_search_says_when_it_beat_them(studies):
    result = eas.search(**FAST, trials=5, study="b", evaluator=by_stem, baselines=["mobilenet_v3_small@0.35"])
    assert result.trials_this_run == 5 and len(result.records) == 5  # the baselines are not trials
    assert sorted(result.baselines) == ["mobilenet_v3_small@0.35", "mobilenet_v3_small@0.35:adapted"]
    for stored in result.baselines.values():
        assert stored.metrics["status"] == "ok" and stored.value("accuracy") == pytest.approx(0.6)
        assert stored.finished <= min(r.started for r in result.records)  # trained before the search
    for found in result.time_to_beat:
        limit = result.baselines[found.baseline].metrics[found.cost]
        beating = [r for r in sorted(result.records, key=lambda r: r.finished) if r.state == "complete"
                   and r.value("accuracy") > 0.6 and r.metrics[found.cost] <= limit]
        assert found.trial == (beating[0].number if beating else None)
    again = eas.search(**FAST, trials=1, study="b", evaluator=by_stem, baselines=["mobilenet_v3_small@0.35"])
    assert again.baselines == result.baselines  # stored once: a resumed search does not train them again
    assert eas.open_study("b").baselines == result.baselines


def test_own_arrays_are_written_once_and_read_by_the_study(studies):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (200, 10, 10), dtype=np.uint8)
    y = rng.integers(0, 3, 200)
    first = eas.search(**{**FAST, "data": (x, y)}, trials=2, study="own", evaluator=by_width)
    files = list((studies / "data").glob("arrays-*.npz"))
    assert len(files) == 1
    with np.load(files[0]) as stored:
        assert np.array_equal(stored["x"], x) and np.array_equal(stored["y"], y)
    eas.search(**{**FAST, "data": (x, y)}, trials=1, study="own", evaluator=by_width)
    assert list((studies / "data").glob("arrays-*.npz")) == files
    assert first.records[0].metrics["fidelity"]  # a normal result
    assert load_study(first.storage, "own").settings["data"] == f"npz:{files[0]}"


def test_any_optuna_sampler_proposes_and_a_worker_cannot_join_without_it(studies):
    result = eas.search(**FAST, trials=4, study="s", evaluator=by_width, sampler=optuna.samplers.RandomSampler(seed=1))
    assert load_study(result.storage, "s").settings["sampler"] == "python:RandomSampler"
    with pytest.raises(UserError, match="sampler given from Python"):
        session.join_study(result.storage, "s")


def test_a_study_of_an_evaluator_is_never_resumed_or_joined_by_training(studies):
    """Its accuracies are the evaluator's: trained ones must never join the same front."""
    result = eas.search(**FAST, trials=2, study="e", evaluator=by_width)
    assert load_study(result.storage, "e").settings["evaluator"] == "python:by_width"
    with pytest.raises(UserError, match="different .*evaluator"):
        eas.search(**FAST, trials=1, study="e")  # without it: candidates would be trained
    with pytest.raises(UserError, match="function given from Python"):
        session.join_study(result.storage, "e")
    with pytest.raises(UserError, match="evaluator must be a function"):
        eas.search(**FAST, trials=1, study="e2", evaluator=0.9)
    trained = eas.search(**FAST, trials=1, study="t", epochs=0.05, rungs=1)
    with pytest.raises(UserError, match="different .*evaluator"):
        eas.search(**FAST, trials=1, study="t", evaluator=by_width)  # nor the other way round
    assert len(load_study(trained.storage, "t").records) == 1


def test_an_evaluator_that_fails_makes_a_failed_trial_with_the_reason_and_the_search_goes_on(studies):
    answers = iter([0.7, math.nan, "high", RuntimeError("no GPU here"), {"accuracy": 2.0}, 0.8, 0.6, 0.75])

    def flaky(arch):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    result = eas.search(**FAST, trials=8, study="f", evaluator=flaky)
    states = [r.state for r in result.records]
    assert states.count("failed") == 4 and states.count("complete") == 4
    reasons = " | ".join(r.reason or "" for r in result.records if r.state == "failed")
    for fragment in ("nan", "'high'", "no GPU here", "2.0"):
        assert fragment in reasons


def test_a_space_given_as_a_dict(studies):
    definition = {"name": "two-stage", "stem": {"width": [8, 16], "kernel": 3, "stride": 1, "act": "relu"},
                  "stages": [{"kind": "ds", "depth": [1, 2], "width": [16, 24], "kernel": 3, "stride": 1,
                              "act": "relu"}],
                  "head": {"width": 0, "hidden": 0, "act": "relu", "dropout": 0.0}}
    result = eas.search(**{**FAST, "space": definition}, trials=3, study="d", evaluator=by_width)
    assert all(r.genome.count("-ds_") == 1 for r in result.records)


@pytest.mark.parametrize("call, fragment", [
    (lambda: eas.search(**FAST, trials=1, bogus=3), "unknown keyword argument 'bogus'"),
    (lambda: eas.search(**FAST, trials=1, constraints={"max_flops": "1M"}), "unknown constraint 'max_flops'"),
    (lambda: eas.search(**{**FAST, "data": 7}, trials=1), "data must be a dataset name"),
    (lambda: eas.search(**FAST, trials=1, sampler=object()), "Optuna sampler instance"),
    (lambda: eas.search(**FAST), "give a --budget"),
    (lambda: eas.search(**{**FAST, "objectives": ["accuracy", "speed"]}, trials=1), "unknown objective speed"),
    (lambda: eas.search(**FAST, trials=1, baselines=["resnet@0.5"]), "unknown reference 'resnet@0.5'"),
    (lambda: eas.search(**FAST, trials=1, baselines=["mobilenet_v2@0.5"], queue=True), "--queue runs nothing"),
])
def test_bad_input_through_the_api_is_the_clis_one_line_error(studies, call, fragment):
    with pytest.raises(UserError, match=fragment) as refused:
        call()
    assert "\n" not in str(refused.value)
    assert not list(studies.glob("*.db")) if studies.exists() else True


def test_importing_eas_changes_nothing_process_wide():
    code = ("import logging, os, signal, sys\n"
            "before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), "
            "logging.getLogger().handlers[:], sys.unraisablehook)\n"
            "import eas\n"
            "from eas import api, application\n"
            "after = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), "
            "logging.getLogger().handlers[:], sys.unraisablehook)\n"
            "print(before == after, os.environ.get('OMP_WAIT_POLICY'), logging.getLogger('eas').handlers)\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.split() == ["True", "None", "[]"], done.stderr


def test_a_search_from_python_installs_no_signal_handler(studies):
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    eas.search(**FAST, trials=1, study="sig", evaluator=by_width)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_an_objective_of_your_own_is_measured_ranked_and_its_reference_derived(studies):
    from eas.objectives import OBJECTIVES

    objective = eas.register_objective("depth", lambda arch, shape, classes: sum(s.repeats for s in arch.stages),
                                       unit="blocks")
    try:
        result = eas.search(**{**FAST, "objectives": ["accuracy", "depth"]}, trials=6, study="own-objective",
                            evaluator=by_width)
        assert all(r.metrics["depth"] == sum(s.repeats for s in eas.Arch.decode(r.genome).stages)
                   for r in result.records)
        largest = max(sum(s.repeats for s in eas.Arch.decode(g).stages) for g in [r.genome for r in result.records])
        assert result.reference["depth"] >= 1.1 * largest - 1e-9  # 1.1 x the space's largest, derived
        assert 0 < result.hypervolume <= 1 and result.front
        def deep_only(arch, shape, classes):  # junk for all but the deepest networks
            depth = sum(s.repeats for s in arch.stages)
            return 1.0 if depth >= 5 else (float("nan") if depth % 2 else "deep")

        OBJECTIVES["junk"] = type(objective)("junk", "junk", "minimize", "", "", deep_only)
        mixed = eas.search(**{**FAST, "objectives": ["accuracy", "junk"]}, trials=6, study="junk-objective",
                           evaluator=by_width)
        failed = [r for r in mixed.records if r.state == "failed"]
        assert failed and all("objective junk measured" in r.reason for r in failed)
        assert len(mixed.records) == 6  # the search went on
        OBJECTIVES["junk"] = type(objective)("junk", "junk", "minimize", "", "", lambda *a: float("nan"))
        with pytest.raises(UserError, match="objective junk failed on the space's largest architecture"):
            eas.search(**{**FAST, "objectives": ["accuracy", "junk"]}, trials=2, study="junk2", evaluator=by_width)
    finally:
        OBJECTIVES.pop("depth", None)
        OBJECTIVES.pop("junk", None)
    with pytest.raises(UserError, match="new name"):
        eas.register_objective("macs", lambda *a: 1.0)


def test_a_microcontroller_search_keeps_every_trial_within_its_sram_and_flash(studies):
    from eas.arch.microcontroller import sram_bytes
    from eas.arch.space import load_space
    from eas.reports.summary import study_lines
    from eas.units import human_bytes

    space = load_space("tiny").for_task((1, 8, 8))
    smallest, largest = space.extremes((1, 8, 8), 10)
    limit = (sram_bytes(smallest, (1, 8, 8), 10) + sram_bytes(largest, (1, 8, 8), 10)) // 2
    result = eas.search(**{**FAST, "objectives": ["accuracy", "sram", "flash"]}, trials=6, study="mcu",
                        evaluator=by_width, constraints={"max_sram": f"{limit}B", "max_flash": "1MB"},
                        sampler="random")
    assert len(result.records) == 6
    for record in result.records:
        assert 0 < record.metrics["sram_bytes"] <= limit
        assert record.metrics["sram_bytes"] == sram_bytes(eas.Arch.decode(record.genome), (1, 8, 8), 10)
        assert 0 < record.metrics["flash_bytes"] <= 1e6
    stored = load_study(result.storage, "mcu")
    assert stored.objectives == ("accuracy", "sram", "flash") and stored.reference["sram"] <= limit
    shown = "\n".join(study_lines("mcu", stored.settings, stored.records, stored.objectives, stored.reference))
    assert "SRAM int8" in shown and "flash int8" in shown  # the Pareto table shows what the study limits
    assert human_bytes(result.knee.metrics["sram_bytes"]) in shown
    with pytest.raises(UserError, match="can meet the constraints.*sram"):
        eas.search(**FAST, trials=1, study="mcu2", evaluator=by_width, constraints={"max_sram": "100B"})
    with pytest.raises(UserError, match="--max-sram"):
        eas.search(**FAST, trials=1, study="mcu3", evaluator=by_width, constraints={"max_sram": "64kg"})


def test_an_export_from_python_adds_onnx_runtimes_mobile_format_checked_there(studies):
    import onnxruntime
    import torch

    from eas.deploy.export import load_standalone

    eas.search(**FAST, trials=2, study="fmt", evaluator=by_width)
    with pytest.raises(UserError, match="choose from pte, ort"):
        eas.export("fmt", out=studies.parent / "bad", formats=["tflite"])
    assert not (studies.parent / "bad").exists()
    folder = eas.export("fmt", out=studies.parent / "knee", formats=["ort"])
    document = json.loads((folder / "arch.json").read_text())
    assert document["formats"] == ["ort"] and document["checks"]["ort_max_abs_diff"] < 1e-4
    torch.manual_seed(0)
    model = load_standalone(folder / "model.py").build_model().eval()  # the weights export wrote: seed 0
    x = torch.randn(5, *document["task"]["input_shape"])
    session = onnxruntime.InferenceSession(str(folder / "model.ort"), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        assert abs(session.run(None, {"input": x.numpy()})[0] - model(x).numpy()).max() < 1e-4


def test_a_space_that_chooses_resolution_exports_networks_that_take_the_datas_images_and_resize_them(studies):
    import onnxruntime
    import torch

    from eas.deploy.export import load_standalone

    definition = {"name": "res", "resolution": [6, 12], "stem": {"width": [8, 16], "kernel": 3, "stride": 1,
                                                                 "act": "relu"},
                  "stages": [{"kind": "ds", "depth": 1, "width": [16, 24], "kernel": 3, "stride": [1, 2],
                              "act": "relu"}], "head": {"width": 0, "hidden": 0, "act": "relu", "dropout": 0.0}}
    result = eas.search(**{**FAST, "space": definition}, trials=4, study="res", evaluator=by_width)
    assert {r.genome.split("_")[1] for r in result.records} <= {"i6", "i12"}  # digits are 8 px: always resized
    folder = eas.export("res", out=studies.parent / "knee", formats=["ort"])
    document = json.loads((folder / "arch.json").read_text())
    assert document["genome"] == result.knee.genome and document["task"]["input_shape"] == [1, 8, 8]
    torch.manual_seed(0)
    model = load_standalone(folder / "model.py").build_model().eval()  # EAS's code not needed: it resizes itself
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        expected = model(x).numpy()
    for name in ("model.onnx", "model.ort"):
        session = onnxruntime.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        assert abs(session.run(None, {"input": x.numpy()})[0] - expected).max() < 1e-4


def test_a_microcontroller_search_says_first_which_choices_a_microcontroller_cannot_run(studies, caplog):
    mcu = {**FAST, "objectives": ["accuracy", "sram", "flash"]}
    with caplog.at_level("WARNING", logger="eas"):
        eas.search(**{**mcu, "space": "hybrid"}, trials=1, study="h", evaluator=by_width)
        warned = [r.getMessage() for r in caplog.records if "TensorFlow Lite Micro" in r.getMessage()]
        assert len(warned) == 1 and "stage3.act: gelu, stage4.act: gelu" in warned[0]
        caplog.clear()
        eas.search(**{**FAST, "space": "hybrid"}, trials=1, study="h2", evaluator=by_width)  # not for a microcontroller
        eas.search(**mcu, trials=1, study="t", evaluator=by_width)  # tiny has no GELU
        assert not [r for r in caplog.records if "TensorFlow Lite Micro" in r.getMessage()]


def test_lower_rungs_train_and_rank_on_smaller_images_and_the_top_rung_at_full_size(studies, monkeypatch):
    """EcoNAS-style: with rung_resolution=0.5 every rung below the top trains and validates
    digits' 8-px images at 4 px, the top rung the same weights at 8 px; a resume must ask the same."""
    from eas.nas.candidate import Candidate
    from eas.reports.summary import fidelity_lines

    seen: list[tuple[str, int, object]] = []
    train, validate = Candidate.train_segment, Candidate.validate

    def training(self, steps, segment=0, **kwargs):
        seen.append(("train", segment, self.model.size))
        return train(self, steps, segment, **kwargs)

    def validating(self, images=None):
        seen.append(("validate", images, self.model.size))
        return validate(self, images)

    monkeypatch.setattr(Candidate, "train_segment", training)
    monkeypatch.setattr(Candidate, "validate", validating)
    result = eas.search(**FAST, trials=2, study="low", epochs=0.3, rungs=2, eta=2, rung_resolution=0.5)
    trained = [(segment, size) for kind, segment, size in seen if kind == "train"]
    assert (0, (4, 4)) in trained and (1, None) in trained  # the first candidate always reaches the top
    assert all(size == ((4, 4) if segment == 0 else None) for segment, size in trained)
    validated = [(images, size) for kind, images, size in seen if kind == "validate"]
    assert all(size == ((4, 4) if images is not None else None) for images, size in validated)  # all: the top rung
    study = load_study(result.storage, "low")
    assert study.settings["multi_fidelity"]["resolution"] == 0.5
    assert "below the top at 0.5x the input size" in fidelity_lines(study.settings, study.records)[0]
    assert any(r.state == "complete" and r.value("accuracy") > 0.1 for r in result.records)
    with pytest.raises(UserError, match="multi_fidelity"):
        eas.search(**FAST, trials=1, study="low", epochs=0.3, rungs=2, eta=2)  # the same rungs at full size
    for bad, match in ((0.3, "from 0.5 to 1"), ("0.7", "rung_resolution must be a number"), (0.7, "--rungs 2 or more")):
        with pytest.raises(UserError, match=match):
            eas.search(**FAST, trials=1, study="bad", rungs=1 if bad == 0.7 else 2, rung_resolution=bad)


def test_a_search_logs_its_progress_one_line_per_trial(studies, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="eas.progress"):
        eas.search(**FAST, trials=3, study="logged", evaluator=by_width)
    lines = [r.getMessage() for r in caplog.records if r.name == "eas.progress"]
    assert len(lines) == 3 and all("finished:" in line and "| Pareto set " in line for line in lines)
    assert [line.split("] trial ")[1].split()[0] for line in lines] == ["0", "1", "2"]
