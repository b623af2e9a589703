"""The latency predictor: what it fits, how it is stored and checked, and how the search uses it
(refusing proposals by prediction before training, measuring at the top rung)."""

import json
import random

import pytest

from eas.arch.space import load_space
from eas.errors import UserError
from eas.measure.calibration import sample_architectures
from eas.measure.predictor import KINDS, Predictor, features, fit, load_predictor
from eas.study.reader import StudyReader
from tests.conftest import assert_user_error, run_eas

SHAPE = (1, 28, 28)


def synthetic_latency(arch) -> float:
    """A device whose kernels cost what their work says: an additive truth the fit must recover."""
    f = features(arch, SHAPE, 10)
    return 0.05 + sum(v * 2e-7 for k, v in f.items() if k.endswith("_macs")) + \
        sum(v * 1e-6 for k, v in f.items() if k.startswith("depthwise") and k.endswith("_values")) + \
        0.01 * sum(v for k, v in f.items() if k.endswith("_count"))


@pytest.fixture(scope="module")
def mobile_sample():
    return sample_architectures(load_space("mobile").for_task(SHAPE), 120, seed=3)


def test_the_additive_predictor_recovers_an_additive_device_and_is_kept(mobile_sample):
    latencies = [synthetic_latency(a) for a in mobile_sample]
    predictor = fit(mobile_sample, latencies, SHAPE, 10, "mobile", {"threads": 1})
    assert predictor.kind == "additive" and set(predictor.compared) == set(KINDS)
    assert predictor.compared["additive"] >= predictor.compared["boosted"]
    assert predictor.error["within"] == 1.0 and predictor.error["n"] == 24
    fresh = sample_architectures(load_space("mobile").for_task(SHAPE), 150, seed=4)[-20:]
    for arch in fresh:
        assert predictor.predict(arch) == pytest.approx(synthetic_latency(arch), rel=0.02)


def test_the_boosted_predictor_wins_where_costs_do_not_add_up(mobile_sample):
    # A device whose latency is a step function of the network's depth: no sum of prices fits it.
    latencies = [1.0 if features(a, SHAPE, 10).get("pointwise_count", 0) < 20 else 3.0 for a in mobile_sample]
    predictor = fit(mobile_sample, latencies, SHAPE, 10, "mobile", {"threads": 1})
    assert predictor.kind == "boosted"
    assert predictor.compared["boosted"] > predictor.compared["additive"]


def test_a_stored_predictor_round_trips_and_an_edited_one_is_refused(mobile_sample, tmp_path):
    latencies = [synthetic_latency(a) for a in mobile_sample]
    predictor = fit(mobile_sample, latencies, SHAPE, 10, "mobile", {"threads": 1})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(predictor.to_dict()))
    again = load_predictor(path)
    assert [again.predict(a) for a in mobile_sample[:5]] == [predictor.predict(a) for a in mobile_sample[:5]]
    edited = predictor.to_dict()
    edited["model"]["prices"] = edited["model"]["prices"][:-1]
    path.write_text(json.dumps(edited))
    with pytest.raises(UserError, match="not a latency predictor"):
        load_predictor(path)
    path.write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        load_predictor(path)
    with pytest.raises(UserError, match="at least 20"):
        fit(mobile_sample[:5], latencies[:5], SHAPE, 10, "mobile", {})


def _tiny_predictor(tmp_path, threads: int = 1) -> tuple[str, Predictor]:
    """A predictor for the tiny space on digits whose figures are known: 1 ms per million MACs."""
    space = load_space("tiny").for_task((1, 8, 8))
    archs = sample_architectures(space, 60, seed=1)
    latencies = [0.01 + features(a, (1, 8, 8), 10)["pointwise_macs"] * 1e-6 for a in archs]
    predictor = fit(archs, latencies, (1, 8, 8), 10, "tiny", {"threads": threads, "url": None})
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(predictor.to_dict()))
    return str(path), predictor


@pytest.mark.slow
def test_the_search_refuses_by_prediction_and_measures_at_the_top_rung(tmp_path):
    path, predictor = _tiny_predictor(tmp_path)
    space = load_space("tiny").for_task((1, 8, 8))
    predicted = sorted(predictor.predict(a) for a in sample_architectures(space, 60, seed=1))
    limit = predicted[len(predicted) // 2]  # about half the space is over it by prediction
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--epochs", "1", "--trials", "6",
                     "--study", "p", "--quiet", "--sampler", "random", "--rungs", "2", "--eta", "2",
                     "--objectives", "accuracy,latency", "--max-latency", f"{limit}ms", "--predictor", path,
                     env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    records = StudyReader(f"sqlite:///{tmp_path / 'studies' / 'p.db'}", "p").loaded().records
    trained = [r for r in records if r.metrics.get("train_steps")]
    assert trained
    for record in trained:  # nothing predicted over the limit was trained
        assert record.metrics["latency_predicted_ms"] <= limit
    top = [r for r in trained if r.metrics.get("latency_source") == "measured"]
    lower = [r for r in trained if r.metrics.get("latency_source") == "predicted"]
    assert top, "a candidate that reached the top rung has a measured latency"
    for record in top:
        assert record.metrics["latency_runtime"]["runtime"].startswith("onnxruntime")
        assert record.metrics["latency_ms"] != record.metrics["latency_predicted_ms"]
    for record in lower:
        assert record.metrics["latency_ms"] == record.metrics["latency_predicted_ms"]
    shown = run_eas("show", "p", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "predicted by a additive predictor" in shown.stdout or "predicted by a boosted predictor" in shown.stdout
    assert "calibration: 100% of 12 held-out networks within +-10%" in shown.stdout
    assert "this study: " in shown.stdout and f"of {len(top)} top-rung measurements" in shown.stdout


@pytest.mark.slow
def test_a_predictor_for_another_runtime_or_data_is_refused_in_one_line(tmp_path):
    path, _ = _tiny_predictor(tmp_path, threads=2)
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    common = ["search", "--space", "tiny", "--trials", "1", "--study", "x", "--quiet", "--predictor"]
    assert_user_error(run_eas(*common, path, "--data", "digits", env=env, cwd=tmp_path), "2 thread(s)")
    path, _ = _tiny_predictor(tmp_path, threads=1)
    assert_user_error(run_eas(*common, path, "--data", "fashion-mnist", env=env, cwd=tmp_path),
                      "fitted for input (1, 8, 8)")
    (tmp_path / "junk.json").write_text(json.dumps({"kind": "additive"}))
    assert_user_error(run_eas(*common, str(tmp_path / "junk.json"), "--data", "digits", env=env, cwd=tmp_path),
                      "not a latency predictor")
    assert not (tmp_path / "studies" / "x.db").exists()


@pytest.mark.slow
def test_eas_agent_calibrate_here_writes_a_predictor_and_reports_its_error(tmp_path):
    out = tmp_path / "pred.json"
    result = run_eas("agent", "calibrate", "--space", "tiny", "--data", "digits", "--n", "24", "--out",
                     str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "held out:" in result.stdout and "of 5 held-out networks" in result.stdout
    predictor = load_predictor(out)
    assert predictor.space == "tiny" and predictor.runtime["threads"] == 1 and predictor.input_shape == (1, 8, 8)
    arch = random.Random(0).choice(sample_architectures(load_space("tiny").for_task((1, 8, 8)), 10, seed=9))
    assert predictor.predict(arch) > 0


@pytest.mark.parametrize("edit, reason", [
    (lambda d: d["model"].update(prices="a string"), "additive prices"),
    (lambda d: d["model"].update(intercept=float("nan")), "additive prices"),
    (lambda d: d.update(names=[1, 2]), "feature names"),
    (lambda d: d.update(scale=[-1.0] * len(d["scale"])), "feature scales"),
    (lambda d: d.update(kind="magic"), "kind"),
    (lambda d: d.update(input_shape=[1, 8]), "input shape"),
])
def test_an_edited_predictor_is_refused_in_one_line(tmp_path, edit, reason):
    path, predictor = _tiny_predictor(tmp_path)
    document = predictor.to_dict()
    edit(document)
    (tmp_path / "edited.json").write_text(json.dumps(document))
    with pytest.raises(UserError, match=reason):
        load_predictor(tmp_path / "edited.json")


def test_a_boosted_predictor_with_a_feature_out_of_range_or_a_loop_is_refused(mobile_sample, tmp_path):
    latencies = [1.0 if features(a, SHAPE, 10).get("pointwise_count", 0) < 20 else 3.0 for a in mobile_sample]
    document = fit(mobile_sample, latencies, SHAPE, 10, "mobile", {"threads": 1}).to_dict()
    assert document["kind"] == "boosted"
    for node_edit in ({"feature": 10_000}, {"left": 0}, {"threshold": "x"}):
        edited = json.loads(json.dumps(document))
        tree = edited["model"]["trees"][0]
        for key, value in node_edit.items():
            tree[key][0] = value
        (tmp_path / "p.json").write_text(json.dumps(edited))
        with pytest.raises(UserError, match="tree 0: node 0"):
            load_predictor(tmp_path / "p.json")
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UserError, match="nested deeper than 64 levels"):
        load_predictor(tmp_path / "deep.json")


@pytest.mark.slow
def test_a_predictor_for_another_space_or_predicting_nonsense_is_refused_by_the_search(tmp_path):
    path, predictor = _tiny_predictor(tmp_path)
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    common = ["search", "--data", "digits", "--trials", "1", "--study", "x", "--quiet", "--objectives",
              "accuracy,latency", "--predictor"]
    assert_user_error(run_eas(*common, path, "--space", "hybrid", env=env, cwd=tmp_path),
                      "fitted on space 'tiny', not 'hybrid'")
    negative = predictor.to_dict()
    negative["model"]["intercept"] = -1e6  # every prediction below zero
    (tmp_path / "negative.json").write_text(json.dumps(negative))
    assert_user_error(run_eas(*common, str(tmp_path / "negative.json"), "--space", "tiny", env=env, cwd=tmp_path),
                      "not a latency predictor")
    assert not (tmp_path / "studies" / "x.db").exists()


def test_a_prediction_out_of_range_is_measured_instead(tmp_path):
    from eas.data.datasets import load_dataset
    from eas.measure.runtime import Runtime
    from eas.nas.candidate import Candidate
    from eas.training.proxy import Fidelity

    _, predictor = _tiny_predictor(tmp_path)
    document = predictor.to_dict()
    document["model"]["prices"] = [p * 1e300 for p in document["model"]["prices"]]  # some predictions overflow
    arch = load_space("tiny").extremes((1, 8, 8), 10)[1]
    candidate = Candidate(arch, load_dataset("digits"), Fidelity(), "cpu",
                          runtime=Runtime("onnxruntime", 1, 32, None, document))
    candidate.predict_latency()
    assert candidate.metrics["latency_source"] == "measured" and 0 < candidate.metrics["latency_ms"] < 1e3
    assert "measured instead" in candidate.metrics["latency_note"]


def test_a_space_that_chooses_resolution_gets_its_resize_priced(tmp_path):
    """The Resize a network starts with is a feature of its own: a device where it is dear is
    predicted as well as one where it is free (without the feature the fit could not tell)."""
    import yaml

    from eas.arch.space import space_from_definition

    definition = {**load_space("mobile").definition, "name": "mobile-res", "resolution": [16, 20, 28]}
    space = space_from_definition(yaml.safe_load(yaml.safe_dump(definition))).for_task(SHAPE)
    sample = sample_architectures(space, 120, seed=3)
    resized = [a for a in sample if a.stem.resolution]
    assert resized and len(resized) < len(sample)  # both kinds in the sample
    tally = features(resized[0], SHAPE, 10)
    r = resized[0].stem.resolution
    assert tally["resize_count"] == 1 and tally["resize_values"] == 28 * 28 + r * r
    assert "resize_count" not in features(next(a for a in sample if not a.stem.resolution), SHAPE, 10)

    def dear_resize(arch) -> float:
        return synthetic_latency(arch) + 1e-4 * features(arch, SHAPE, 10).get("resize_values", 0.0)

    predictor = fit(sample, [dear_resize(a) for a in sample], SHAPE, 10, "mobile-res", {"threads": 1})
    fresh = sample_architectures(space, 150, seed=4)[-20:]
    assert any(a.stem.resolution for a in fresh)
    for arch in fresh:
        assert predictor.predict(arch) == pytest.approx(dear_resize(arch), rel=0.02)
