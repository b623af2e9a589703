"""`eas verify --baselines`: the retrained front against hand-designed families trained the same
way; what the comparison concludes; a verify killed midway resumes without retraining."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import time

import pytest
import torch

from eas.arch.space import load_space
from eas.errors import UserError
from eas.nas.baselines import (
    accuracy_gain,
    best_within,
    cheapest_reaching,
    check_baselines_fit,
    compare,
    parse_baselines,
)
from eas.nas.candidate import wilson_interval
from eas.study import schema
from tests.conftest import EAS, assert_user_error, run_eas

OBJECTIVES = ("accuracy", "macs")
REFERENCE = {"macs": 100.0}


def model(accuracy: float, macs: float, latency: float = math.nan, images: int = 1000, **fields) -> dict:
    """A verified row as verify_front makes it: accuracy with its pooled Wilson interval, costs."""
    interval = list(wilson_interval(round(accuracy * images), images))
    return {"verified_accuracy": accuracy, "verified_interval": interval,
            "costs": {"macs": macs, "latency_ms": latency}, **fields}


def test_baseline_specs_name_families_at_multipliers_and_the_space_default():
    mobile, tiny = load_space("mobile", (1, 28, 28)), load_space("tiny", (1, 28, 28))
    assert parse_baselines(["mobilenet_v3_small@0.5,0.75", "mobilenet_v2@0.35", "mobilenet_v3_small@0.5"],
                           mobile) == ["mobilenet_v3_small@0.5", "mobilenet_v3_small@0.75", "mobilenet_v2@0.35"]
    # auto: the families whose full-width network the space contains (mobile contains MobileNetV2)
    assert parse_baselines(["auto"], mobile) == [f"mobilenet_v2@{a}" for a in (0.35, 0.5, 0.75, 1.0)]
    assert parse_baselines(["mobilenet_v1"], tiny) == [f"mobilenet_v1@{a}" for a in (0.35, 0.5, 0.75, 1.0)]
    assert parse_baselines(["auto"], tiny) == [] and parse_baselines(["none"], mobile) == []
    for bad in ("mobilenet_v2@0", "mobilenet_v2@-1", "mobilenet_v2@abc", "mobilenet_v2@100", "resnet@1",
                "mobilenet_v2@0.5,"):
        with pytest.raises(UserError):
            parse_baselines([bad], mobile)


def test_a_baseline_the_data_cannot_feed_is_refused_before_training():
    check_baselines_fit(["mobilenet_v2@0.35", "mobilenet_v2@0.35:adapted"], (1, 8, 8), 10, "digits")
    with pytest.raises(UserError, match="baseline mobilenet_v2@4.0 does not fit data big"):
        check_baselines_fit(["mobilenet_v2@4.0"], (3, 2048, 2048), 10, "big")


def test_the_gain_interval_is_newcombes_from_both_wilson_intervals():
    member, baseline = model(0.80, 10, images=400), model(0.70, 10, images=400, name="b")
    gain = accuracy_gain(member, baseline)
    assert gain["gain"] == pytest.approx(0.10) and gain["baseline"] == "b"
    (l1, u1), (l2, u2) = member["verified_interval"], baseline["verified_interval"]
    assert gain["interval"] == pytest.approx([0.10 - math.hypot(0.80 - l1, u2 - 0.70),
                                              0.10 + math.hypot(u1 - 0.80, 0.70 - l2)])
    # wider than the sum of neither, narrower than adding the half-widths
    assert gain["interval"][0] > 0.10 - ((0.80 - l1) + (u2 - 0.70))
    assert gain["interval"][0] < 0.10 - max(0.80 - l1, u2 - 0.70)


def test_a_member_is_compared_with_the_best_baseline_that_costs_no_more():
    baselines = [model(0.60, 5, 1.0, name="small", family="f"), model(0.75, 20, 3.0, name="large", family="f"),
                 model(0.70, 12, math.nan, name="untimed", family="f")]
    member = model(0.72, 12, 2.0, trial=1)
    assert best_within(member, baselines, "macs")["name"] == "untimed"  # equal MACs count as no more
    assert best_within(member, baselines, "latency_ms")["name"] == "small"  # an unmeasured latency never does
    assert best_within(model(0.9, 1, 0.5), baselines, "macs") is None
    members = [model(0.72, 12, 2.0, trial=1), model(0.65, 4, 0.8, trial=2)]
    assert cheapest_reaching(baselines[0], members, "macs")["trial"] == 2
    assert cheapest_reaching(baselines[1], members, "macs") is None  # nobody reaches 75%


def test_a_front_that_dominates_a_family_wins_on_every_count():
    members = [model(0.80, 10, 1.0, trial=1, name="t1", family="eas"),
               model(0.90, 30, 3.0, trial=2, name="t2", family="eas")]
    family = [model(0.70, 10, 1.0, trial=7, name="f@0.5", family="f"),
              model(0.85, 40, 4.0, trial=8, name="f@1.0", family="f")]
    found = compare(members, family, OBJECTIVES, REFERENCE)
    assert found["hypervolume"]["front"] > found["hypervolume"]["families"]["f"] > 0
    summary = found["summary"]
    assert summary["hypervolume_ratio"] == pytest.approx(found["hypervolume"]["front"]
                                                         / found["hypervolume"]["families"]["f"])
    # at 10 MACs: 80% vs 70%; at 30 MACs the best baseline within is still f@0.5: 90% vs 70%
    assert [m["at_macs"]["gain"] for m in found["members"]] == pytest.approx([0.10, 0.20])
    assert summary["gain_at_macs"] == pytest.approx(0.15)
    # f@0.5's 70% is reached by trial 1 at the same cost; f@1.0's 85% by trial 2 at 30/40
    assert [b["macs_ratio"] for b in found["baselines"]] == pytest.approx([1.0, 0.75])
    assert found["baselines"][1]["macs_trial"] == 2
    reversed_roles = compare(family, members, OBJECTIVES, REFERENCE)["summary"]
    assert reversed_roles["gain_at_macs"] < 0 and reversed_roles["hypervolume_ratio"] < 1


def test_coverage_counts_the_baselines_a_member_matches_within_the_noise_at_no_more_latency():
    from eas.nas.baselines import covers

    members = [model(0.80, 10, 1.0, trial=1), model(0.70, 5, 0.5, trial=2)]
    baselines = [model(0.805, 12, 1.2, name="a", family="f"),  # within the noise, costlier: covered
                 model(0.90, 20, 2.0, name="b", family="f"),  # far more accurate: not covered
                 model(0.60, 1, 0.1, name="c", family="g")]  # faster than every member: not covered
    assert covers(members[0], baselines[0]) and not covers(members[0], baselines[1])
    assert not covers(members[1], baselines[2]) and not covers(model(0.9, 1, math.nan), baselines[2])
    summary = compare(members, baselines, OBJECTIVES, REFERENCE)["summary"]
    assert summary["coverage"] == pytest.approx(1 / 3) and summary["best_gain"] == pytest.approx(-0.10)
    volumes = compare(members, baselines, OBJECTIVES, REFERENCE)["hypervolume"]
    assert volumes["all_baselines"] >= max(volumes["families"].values())
    assert summary["hypervolume_ratio_union"] == pytest.approx(volumes["front"] / volumes["all_baselines"])


def test_a_family_beyond_the_reference_point_has_no_volume_and_no_ratio():
    found = compare([model(0.8, 10, trial=1)], [model(0.9, 500, name="big@1", family="big")], OBJECTIVES,
                    REFERENCE)
    assert found["hypervolume"]["families"]["big"] == 0 and found["summary"]["hypervolume_ratio"] is None
    assert found["members"][0]["at_latency"] is None and found["summary"]["gain_at_latency"] is None


def test_the_recipe_reaches_proxy_training_and_is_deterministic():
    from eas.arch.builder import build
    from eas.training.proxy import Fidelity, train
    from eas.training.recipe import Recipe

    x = torch.rand(64, 1, 8, 8)
    y = torch.randint(0, 4, (64,))

    def weights(recipe: Recipe) -> torch.Tensor:
        torch.manual_seed(0)
        net = build("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0", (1, 8, 8), 4)
        train(net, x, y, Fidelity(batch_size=16, lr=0.01), torch.device("cpu"), seed=3, steps=6, recipe=recipe)
        return torch.cat([p.detach().flatten() for p in net.parameters()])

    plain, shifted = weights(Recipe()), weights(Recipe("standard", 0.1, 0.9))
    assert torch.equal(shifted, weights(Recipe("standard", 0.1, 0.9)))  # same seed, same recipe, same weights
    for other in (Recipe("standard"), Recipe(label_smoothing=0.1), Recipe(ema=0.9)):
        assert not torch.equal(weights(other), plain)  # each part of the recipe changes the training


def test_a_stored_verification_with_malformed_baselines_is_not_read():
    member = {"trial": 1, "search_accuracy": 0.5, "verified_accuracy": 0.6, "held_place": True, "genome": "g",
              "seed_spread": None}
    result = {"members": [member], "of": 1, "steps": 1, "factor": 1, "seeds": 2, "seconds": 1, "held": 1,
              "kendall_tau": None}
    baseline = {"name": "b", "family": "f", "verified_accuracy": 0.5, "verified_interval": [0.4, 0.6], "costs": {}}
    comparison = compare([model(0.6, 1, trial=1)], [model(0.5, 1, name="b", family="f")], OBJECTIVES, REFERENCE)
    assert schema.valid_verification(result)
    assert schema.valid_verification({**result, "baselines": [baseline], "comparison": comparison})
    assert not schema.valid_verification({**result, "baselines": [baseline]})  # baselines without conclusions
    assert not schema.valid_verification({**result, "baselines": [{**baseline, "verified_interval": "x"}],
                                          "comparison": comparison})
    broken = json.loads(json.dumps(comparison))
    broken["members"][0]["at_macs"] = {"baseline": "b", "gain": "lots"}
    assert not schema.valid_verification({**result, "baselines": [baseline], "comparison": broken})


def _stored_runs(database) -> dict:
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT key, value_json FROM study_user_attributes WHERE key LIKE ?",
                                  (schema.VERIFY_RUN + "%",)).fetchall()
    return {key: json.loads(value) for key, value in rows}


@pytest.mark.slow
def test_verify_with_baselines_killed_midway_resumes_without_training_again(small_study, tmp_path, monkeypatch):
    root, _ = small_study
    studies = tmp_path / "studies"
    studies.mkdir()
    with sqlite3.connect(root / "studies" / "s.db") as source, sqlite3.connect(studies / "s.db") as copy:
        source.backup(copy)  # a copy: the shared study stays as other tests expect it
    env = {"EAS_STUDIES_DIR": str(studies)}
    refused = run_eas("verify", "s", "--baselines", "mobilenet_v3_small@0.35", "--seeds", "1", env=env, cwd=tmp_path)
    assert_user_error(refused, "at least 2 seeds")
    assert_user_error(run_eas("verify", "s", "--baselines", "mobilenet_v2@abc", env=env, cwd=tmp_path), "abc")
    assert_user_error(run_eas("verify", "s", "--top", "100", env=env, cwd=tmp_path), "the Pareto set of study 's' has")
    args = ["verify", "s", "--top", "2", "--factor", "1", "--baselines", "mobilenet_v3_small@0.35",
            "--augment", "auto", "--json"]
    earlier = _stored_runs(studies / "s.db")  # another test's plain verify of the shared study may have stored some
    process = subprocess.Popen([*EAS, *args], cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    while len(_stored_runs(studies / "s.db")) == len(earlier) and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    before = {k: v for k, v in _stored_runs(studies / "s.db").items() if k not in earlier}
    assert before, "the verify stopped before storing any run"

    resumed = run_eas(*args, env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    found = json.loads(resumed.stdout)
    models = len(found["members"]) + 2  # the baseline as published and adapted to the 8x8 digits
    assert found["trained"] + found["reused"] == 2 * models  # two seeds each
    assert found["reused"] >= len(before)
    after = _stored_runs(studies / "s.db")
    assert {k: after[k] for k in before} == before  # nothing finished was trained again or overwritten
    assert len(after) - len(earlier) == 2 * models
    assert found["recipe"]["augment"] == "shift"  # auto on digits: shifted, never flipped
    # Scored on the held-out test split the study recorded when it was created, never on validation
    assert found["split"] == "test" and found["test_split"]["source"] == "held out" and found["test_split"]["recorded"]
    assert all(m["verified_interval"][0] <= m["verified_accuracy"] for m in found["members"])
    baseline, adapted = found["baselines"]
    assert baseline["name"] == "mobilenet_v3_small@0.35" and baseline["seeds"] == 2
    assert baseline["costs"]["latency_ms"] > 0 and baseline["costs"]["macs"] > 0
    assert adapted["name"] == "mobilenet_v3_small@0.35:adapted" and adapted["family"] == "mobilenet_v3_small adapted"
    assert adapted["costs"]["macs"] > baseline["costs"]["macs"]  # fewer stride-2 steps: larger maps
    assert found["comparison"]["members"][0]["trial"] == found["members"][0]["trial"]

    shown = run_eas("show", "s", env=env, cwd=tmp_path)
    assert "mobilenet_v3_small@0.35" in shown.stdout and "hypervolume front" in shown.stdout
    assert "recipe      augment shift" in shown.stdout
    assert "scored on   270 images of the held-out test split, which neither the search nor" in shown.stdout
    again = json.loads(run_eas(*args, env=env, cwd=tmp_path).stdout)
    assert again["trained"] == 0 and [m["verified_accuracy"] for m in again["members"]] == \
        [m["verified_accuracy"] for m in found["members"]]
    from eas.reports.explorer import verified_rows
    from eas.reports.figures import add_verified, pareto_figure
    from eas.study.reader import load_study

    loaded = load_study(f"sqlite:///{studies / 's.db'}", "s")
    rows = verified_rows(loaded.verification[-1])
    assert [r["family"] for r in rows if r["role"] == "baseline"] == ["mobilenet_v3_small",
                                                                      "mobilenet_v3_small adapted"]
    figure = add_verified(pareto_figure([], "macs", "accuracy"), rows, "macs", "accuracy")
    assert [trace.name for trace in figure.data] == ["retrained front", "mobilenet_v3_small",
                                                     "mobilenet_v3_small adapted"]

    # The explorer draws the family beside the retrained front, and states the comparison.
    from streamlit.testing.v1 import AppTest

    from tests.ui.test_ui import APP, no_exception

    monkeypatch.setenv("EAS_STUDIES_DIR", str(studies))
    monkeypatch.delenv("EAS_UI_STORAGE", raising=False)
    app = AppTest.from_file(APP, default_timeout=120)
    app.run()
    app.switch_page("app_pages/pareto.py").run()
    no_exception(app)
    names = [trace["name"] for trace in json.loads(app.get("plotly_chart")[0].proto.spec)["data"]]
    assert "retrained front" in names and "mobilenet_v3_small" in names
    app.switch_page("app_pages/progress.py").run()
    no_exception(app)
    assert "hypervolume front" in app.code[0].value


def test_each_baseline_is_trained_as_published_and_as_adapted_to_the_input_where_they_differ():
    from eas.nas.baselines import baseline_arch, family_of, with_adapted

    assert with_adapted(["mobilenet_v2@0.5"], (1, 28, 28)) == ["mobilenet_v2@0.5", "mobilenet_v2@0.5:adapted"]
    assert with_adapted(["mobilenet_v2@0.5"], (3, 224, 224)) == ["mobilenet_v2@0.5"]  # nothing to adapt at 224 px
    published, adapted = (baseline_arch(n, (1, 28, 28)) for n in ("mobilenet_v2@0.5", "mobilenet_v2@0.5:adapted"))
    strides = [[adapted.stem.stride, *(s.stride for s in adapted.stages)],
               [published.stem.stride, *(s.stride for s in published.stages)]]
    assert sum(s == 2 for s in strides[0]) == 3 < sum(s == 2 for s in strides[1]) == 5  # 28 px -> a 3-px last map
    assert strides[0][:3] == [1, 1, 1] and strides[1][:3] == [2, 1, 2]  # the earliest strides went
    assert family_of("mobilenet_v2@0.5:adapted") == "mobilenet_v2 adapted" and family_of("mobilenet_v2@1.0") == \
        "mobilenet_v2"
