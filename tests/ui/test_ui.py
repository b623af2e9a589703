"""The Pareto explorer: every page through streamlit's AppTest, and once in a real browser."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from eas.reports.explorer import front_of, trial_rows
from eas.reports.front import hypervolume, knee, pareto_front
from eas.study.reader import load_study
from tests.conftest import ROOT, assert_user_error, free_port, run_eas

APP = str(ROOT / "eas" / "ui" / "app.py")
pytestmark = pytest.mark.slow


@pytest.fixture
def app(small_study, monkeypatch):
    root, env = small_study
    monkeypatch.setenv("EAS_STUDIES_DIR", env["EAS_STUDIES_DIR"])
    monkeypatch.delenv("EAS_UI_STORAGE", raising=False)
    test = AppTest.from_file(APP, default_timeout=120)
    test.run()
    return test


def no_exception(test):
    assert not test.exception, [e.value for e in test.exception]
    assert not test.error, [e.value for e in test.error]


def test_studies_page_lists_the_study(app):
    no_exception(app)
    table = app.dataframe[0].value
    assert list(table["study"]) == ["s"] and list(table["space"]) == ["tiny"]
    assert list(table["trials"]) == [6]


def test_pareto_page_draws_the_front_and_the_sliders_filter_it(app, small_study):
    app.switch_page("app_pages/pareto.py").run()
    no_exception(app)
    charts = app.get("plotly_chart")
    assert len(charts) == 2  # the Pareto view and, with four objectives, parallel coordinates
    figure = json.loads(charts[0].proto.spec)
    assert {trace["name"] for trace in figure["data"]} >= {"knee"}
    hover = " ".join(t for trace in figure["data"] for t in trace.get("text", []))
    assert "genome: stem_" in hover and "energy_source: estimated" in hover

    root, env = small_study
    cli = json.loads(run_eas("show", "s", "--json", env=env, cwd=root).stdout)
    assert f"trial {cli['knee']} " in app.success[0].value  # the same knee as the CLI
    before = len(app.dataframe[0].value)
    assert before == len(cli["pareto"])
    macs = next(s for s in app.slider if s.label == "max MACs (M)")
    # in the tables' units, starting at the front's largest value
    assert macs.value == macs.max == pytest.approx(max(p["macs"] for p in cli["pareto"]) / 1e6)
    macs.set_value(macs.min).run()
    no_exception(app)
    assert len(app.dataframe[0].value) < before

    three_d = app.toggle[0]
    three_d.set_value(True).run()
    spec = json.loads(app.get("plotly_chart")[0].proto.spec)
    assert spec["data"][0]["type"] == "scatter3d"
    assert spec["layout"]["scene"]["yaxis"]["tickformat"] == ".0%"  # accuracy as the tables show it


def test_progress_page_states_the_reference_point(app, small_study):
    app.switch_page("app_pages/progress.py").run()
    no_exception(app)
    assert len(app.get("plotly_chart")) == 3
    assert "reference point" in app.caption[0].value
    root, env = small_study
    cli = json.loads(run_eas("show", "s", "--json", env=env, cwd=root).stdout)
    assert app.metric[0].value == f"{cli['hypervolume']:.4f}"


def test_trial_page_shows_layers_metrics_and_downloads(app):
    app.switch_page("app_pages/trial.py").run()
    no_exception(app)
    assert len(app.get("download_button")) == 2
    tables = [t.value for t in app.dataframe]
    assert not any("layer" in t.columns for t in tables)  # built (importing torch) only when asked
    metrics = next(t for t in tables if "metric" in t.columns)
    assert "(estimated)" in " ".join(metrics["value"])
    next(t for t in app.toggle if t.label == "layer table").set_value(True).run()
    no_exception(app)
    layers = next(v for v in (t.value for t in app.dataframe) if "layer" in v.columns)
    assert layers["MACs"].sum() > 0 and len(layers) >= 3


def test_missing_and_corrupt_storage_give_a_message_not_a_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_UI_STORAGE", f"sqlite:///{tmp_path / 'missing.db'}")
    test = AppTest.from_file(APP, default_timeout=60)
    test.run()
    assert not test.exception and "no study storage" in test.error[0].value
    (tmp_path / "bad.db").write_bytes(b"garbage" * 100)
    monkeypatch.setenv("EAS_UI_STORAGE", f"sqlite:///{tmp_path / 'bad.db'}")
    test = AppTest.from_file(APP, default_timeout=60)
    test.run()
    assert not test.exception and "not a readable SQLite" in test.error[0].value
    assert (tmp_path / "bad.db").read_bytes() == b"garbage" * 100


def test_pure_functions_give_the_cli_numbers(small_study):
    root, env = small_study
    study = load_study(f"sqlite:///{root / 'studies' / 's.db'}", "s")
    cli = json.loads(run_eas("show", "s", "--json", env=env, cwd=root).stdout)
    front = pareto_front(study.records, study.objectives)
    assert [r.number for r in front] == [row["trial"] for row in cli["pareto"]]
    assert knee(front, study.objectives).number == cli["knee"]
    assert hypervolume(study.records, study.objectives, study.reference) == cli["hypervolume"]
    rows = trial_rows(study.records, study.objectives)
    assert sum(r["pareto"] for r in rows) == len(front)
    assert front_of(study.records, rows, study.objectives) == front


def test_reading_a_study_while_a_search_writes_it(tmp_path):
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    search = subprocess.Popen([sys.executable, "-m", "eas", "search", "--space", "tiny", "--data", "digits",
                               "--epochs", "2", "--budget", "15s", "--study", "live", "--quiet", "--json"],
                              cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    url = f"sqlite:///{tmp_path / 'studies' / 'live.db'}"
    reads = 0
    while search.poll() is None:
        time.sleep(0.3)
        try:
            study = load_study(url, "live")
        except Exception:  # not created yet
            continue
        trial_rows(study.records, study.objectives)
        reads += 1
    out, err = search.communicate()
    assert search.returncode == 0, err
    assert reads >= 5
    assert json.loads(out)["counts"]["failed"] == 0


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is not installed")
def test_real_browser_shows_the_pareto_chart_and_leaves_an_empty_log(small_study, tmp_path):
    """A browser session over two studies: /pareto opened directly shows the most recent one, every
    page renders, and the server's log holds nothing but its start (no thread's traceback)."""
    from playwright.sync_api import sync_playwright

    import eas

    root, _ = small_study
    shutil.copytree(root / "studies", tmp_path / "studies")
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    os.environ.update(env)
    try:  # a second, newer study beside the shared one
        eas.search(space="tiny", data="digits", trials=4, study="second", warm_start=False, sampler="random",
                   evaluator=lambda arch: 0.5 + arch.stem.width / 100)
    finally:
        os.environ.pop("EAS_STUDIES_DIR")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "eas", "ui", "--port", str(port)], cwd=tmp_path,
                              env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.3)
        artifacts = ROOT / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/pareto")  # opened directly: the most recent study
            page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg', timeout=90_000)
            assert page.get_by_text("Pareto front — second").count() == 1
            assert page.get_by_text("most recently started study, second").count() == 1
            for path in ("", "progress", "trial"):  # the other pages of the session, then the first study
                page.goto(f"http://127.0.0.1:{port}/{path}")
                page.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=90_000)
                page.wait_for_timeout(1500)  # what the page draws after its first paint
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_text("Open study").wait_for(timeout=90_000)
            page.get_by_role("combobox").first.click()
            page.get_by_role("option").filter(has_text=str(root / "studies" / "s.db").split("/")[-1]).first.click()
            page.goto(f"http://127.0.0.1:{port}/pareto")
            page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg', timeout=90_000)
            assert page.locator(".scatterlayer .point").count() >= 3
            page.screenshot(path=str(artifacts / "explorer-pareto.png"))
            browser.close()
        assert (artifacts / "explorer-pareto.png").stat().st_size > 10_000
        # bound to localhost only: the same port on another interface is closed
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            with socket.socket() as s:
                assert s.connect_ex((address, port)) != 0
    finally:
        server.terminate()
        log, _ = server.communicate(timeout=30)
    assert Path(artifacts / "explorer-pareto.png").exists()
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("stop", ["terminate", "kill"])
def test_stopping_eas_ui_stops_its_server(small_study, stop):
    """SIGTERM (a service manager) or SIGKILL: the Streamlit child does not outlive `eas ui`."""
    root, env = small_study
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "eas", "ui", "--port", str(port)], cwd=root,
                              env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not port_open(port) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert port_open(port), "the explorer never listened"
    getattr(server, stop)()
    assert server.wait(timeout=60) == (0 if stop == "terminate" else -signal.SIGKILL)
    deadline = time.monotonic() + 30
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not port_open(port), "the Streamlit child is still listening"


def test_eas_ui_refuses_a_host_it_cannot_bind(small_study):
    root, env = small_study
    assert_user_error(run_eas("ui", "--host", "garbage host!", env=env, cwd=root), "--host")


def test_hostile_trials_render_as_text_on_every_page(tmp_path, monkeypatch):
    from tests.study_factory import make_study, plant

    url = f"sqlite:///{tmp_path / 'h.db'}"
    study = make_study(url, "h", trials=6)
    plant(study, "stem_c8192_k7_s1_relu-ir_r32_k7_s1_e16_c8192_se_relu-head_c8192_f8192_relu_d0",
          {"accuracy": 1.0, "macs": 1, "params": 1, "inference_energy_j_per_1k": 0.0})
    plant(study, "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0",
          {"accuracy": 0.99, "macs": 1, "params": 1, "inference_energy_j_per_1k": 0.001, "status": "ok"},
          reason="![i](http://host/track.png)")
    monkeypatch.setenv("EAS_UI_STORAGE", url)
    test = AppTest.from_file(APP, default_timeout=120)
    test.run()
    for page in ("app_pages/pareto.py", "app_pages/progress.py", "app_pages/trial.py"):
        test.switch_page(page).run()
        no_exception(test)
    assert any("malformed" in e.label for e in test.expander)
    captions = " ".join(c.value for c in test.caption)
    assert "track\\.png" in captions and "![i](" not in captions and "\\!\\[i\\]" in captions


def test_the_progress_page_says_how_long_the_search_took_to_beat_its_baselines_as_eas_show_does(tmp_path,
                                                                                                   monkeypatch):
    from eas.study import schema
    from tests.study_factory import make_study

    url = f"sqlite:///{tmp_path / 'b.db'}"
    study = make_study(url, "b", trials=6)
    finished = min(t.datetime_start for t in study.trials).timestamp()
    for name, accuracy in (("mobilenet_v2@0.35", 0.05), ("mobilenet_v2@0.35:adapted", 0.999)):
        study.set_user_attr(schema.BASELINE + name, {"metrics": {"status": "ok", "accuracy": accuracy, "macs": 10**9},
                                                     "started": finished - 60, "finished": finished})
    monkeypatch.setenv("EAS_UI_STORAGE", url)
    test = AppTest.from_file(APP, default_timeout=120)
    test.run()
    test.switch_page("app_pages/progress.py").run()
    no_exception(test)
    shown = [c.value for c in test.code if "time to beat" in c.value]
    assert len(shown) == 1 and "mobilenet_v2@0.35:adapted, 99.90%" in shown[0] and "not yet" in shown[0]
    printed = run_eas("show", "b", "--storage", url)
    assert printed.returncode == 0, printed.stderr
    assert shown[0] in printed.stdout  # the same lines as the command line


def test_the_progress_page_and_eas_show_say_the_lower_rungs_trained_on_smaller_images(tmp_path, monkeypatch):
    from tests.study_factory import make_study

    url = f"sqlite:///{tmp_path / 'r.db'}"
    make_study(url, "r", trials=3, multi_fidelity={"steps": [3, 9, 27], "eta": 3, "resolution": 0.7})
    monkeypatch.setenv("EAS_UI_STORAGE", url)
    test = AppTest.from_file(APP, default_timeout=120)
    test.run()
    test.switch_page("app_pages/progress.py").run()
    no_exception(test)
    assert any("below the top at 0.7x the input size" in c.value for c in test.caption)
    printed = run_eas("show", "r", "--storage", url)
    assert printed.returncode == 0 and "(eta 3; below the top at 0.7x the input size)" in printed.stdout


def test_a_trial_tied_within_its_interval_is_called_tied_not_dominated(tmp_path):
    from eas.arch.counting import arch_cost
    from eas.arch.genome import Arch
    from tests.study_factory import CLASSES, SHAPE, make_study, plant

    study = make_study(f"sqlite:///{tmp_path / 't.db'}", "t", trials=0)
    accuracies = ((0.80, 0.79, 0.81), (0.805, 0.795, 0.815), (0.70, 0.69, 0.71))  # cheapest first
    for width, (accuracy, low, high) in zip((8, 16, 24), accuracies, strict=True):
        genome = f"stem_c{width}_k3_s1_relu-ds_r1_k3_s1_c16_relu-head_c0_f0_relu_d0"
        cost = arch_cost(Arch.decode(genome), SHAPE, CLASSES)
        plant(study, genome, {"status": "ok", "accuracy": accuracy, "accuracy_low": low, "accuracy_high": high,
                              "macs": cost.macs, "params": cost.params, "inference_energy_j_per_1k": 1.0,
                              "energy_source": "estimated"})
    loaded = load_study(f"sqlite:///{tmp_path / 't.db'}", "t")
    roles = [row["role"] for row in trial_rows(loaded.records, loaded.objectives)]
    assert roles == ["knee", "tied", "dominated"]
