"""Whether a trained network deploys in a format (`eas verify --deploy`): written, run in the
format's own runtime, compared with PyTorch, timed and weighed; a failure is the finding."""

import json
import subprocess
from dataclasses import replace

import pytest
import torch

from eas.arch.builder import build
from eas.arch.genome import Arch
from eas.data.datasets import load_dataset
from eas.deploy.deployable import check_deployable
from eas.deploy.formats import FORMATS
from eas.reports.summary import deploy_lines
from tests.conftest import assert_user_error, run_eas

GENOME = "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-ir_r1_k3_s2_e2_c24_relu6-head_c0_f0_relu_d0"


@pytest.fixture(scope="module")
def model_and_task():
    task = load_dataset("digits")
    torch.manual_seed(0)
    model = build(Arch.decode(GENOME), task.input_shape, task.num_classes)
    with torch.no_grad():  # BatchNorms with the statistics of real images, as after training
        model.train()
        model(task.train_x[:256].float())
    return model.eval(), task


def test_a_network_that_converts_is_deployable_with_its_figures(model_and_task):
    model, task = model_and_task
    checked = check_deployable(model, task, FORMATS["ort"], threads=1, images=64)
    assert checked["deployable"] is True and checked["reason"] is None
    figures = checked["float"]
    assert figures["top1_agreement"] == 1.0 and figures["max_abs_diff"] < 1e-4 and figures["images"] == 64
    assert figures["latency_ms"] > 0 and figures["bytes"] > sum(p.numel() for p in model.parameters()) * 4
    int8 = checked["int8"]  # the static QDQ graph, calibrated on training images
    assert int8["top1_agreement"] >= 0.8 and int8["max_abs_diff"] > figures["max_abs_diff"] and int8["bytes"] > 0


def test_a_converter_that_fails_makes_the_member_not_deployable_with_the_reason(model_and_task):
    model, task = model_and_task

    def unsupported(model, example, path):
        raise RuntimeError("operator aten::gelu has no kernel\nmore detail")

    checked = check_deployable(model, task, replace(FORMATS["ort"], write=unsupported), images=16)
    assert checked["deployable"] is False
    assert checked["reason"] == "RuntimeError: operator aten::gelu has no kernel"


def test_a_file_whose_answers_differ_from_pytorch_is_not_deployable(model_and_task):
    model, task = model_and_task
    load = FORMATS["ort"].load

    def negated(path, threads):  # a runtime that gets the sign of every logit wrong
        predict = load(path, threads)
        return lambda x: -predict(x)

    checked = check_deployable(model, task, replace(FORMATS["ort"], load=negated), images=64)
    assert checked["deployable"] is False and "differ from PyTorch's on" in checked["reason"]


def test_deploy_lines_read_a_shared_studys_malformed_figures_without_failing():
    result = {"deploy": "pte", "members": [
        {"trial": 1, "deploy": {"deployable": True, "threads": 1, "float": {"top1_agreement": "x"}}},
        {"trial": 2, "deploy": {"deployable": False, "reason": "no\x1b[31m kernel", "float": {"failed": "boom"}}},
        {"trial": 3, "deploy": "junk"}]}
    text = "\n".join(deploy_lines(result))
    assert "unreadable" in text and "no: no" in text and "\x1b" not in text and "not checked" in text


@pytest.mark.slow
def test_verify_deploy_marks_every_member_and_a_second_run_reuses_it(small_study, tmp_path, monkeypatch):
    root, _ = small_study
    subprocess.run(["cp", "-r", str(root / "studies"), str(tmp_path / "studies")], check=True)  # the shared one stays
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    args = ["verify", "s", "--top", "1", "--seeds", "1", "--baselines", "none", "--epochs", "1", "--deploy", "ort"]
    first = run_eas(*args, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "deployable  in ort, run in its own runtime at 1 thread(s)" in first.stdout
    shown = json.loads(run_eas("show", "s", "--json", env=env, cwd=tmp_path).stdout)["verification"]
    checked = shown["members"][0]["deploy"]
    assert shown["deploy"] == "ort" and checked["deployable"] is True and checked["reason"] is None
    assert checked["float"]["top1_agreement"] == 1.0 and checked["float"]["latency_ms"] > 0
    assert checked["int8"]["top1_agreement"] >= 0.8 and checked["int8"]["bytes"] > 0
    again = run_eas(*args, "--json", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["trained"] == 0  # the stored run already holds its check
    assert_user_error(run_eas(*args[:-1], "tflite", env=env, cwd=tmp_path), "--deploy 'tflite': choose from pte, ort")

    # The explorer's Pareto page marks the member too.
    from streamlit.testing.v1 import AppTest

    from tests.ui.test_ui import APP, no_exception

    monkeypatch.setenv("EAS_STUDIES_DIR", env["EAS_STUDIES_DIR"])
    monkeypatch.delenv("EAS_UI_STORAGE", raising=False)
    app = AppTest.from_file(APP, default_timeout=120)
    app.run()
    app.switch_page("app_pages/pareto.py").run()
    no_exception(app)
    table = next(frame.value for frame in app.dataframe if "deployable" in frame.value)
    assert list(table["deployable"]) == ["yes"] and list(table["trial"]) == [str(shown["members"][0]["trial"])]
