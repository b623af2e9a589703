"""The measuring agent (`eas agent serve` / `eas-agent serve`) as a real process on 127.0.0.1,
pinned to one core like a small target, with torch and EAS made unimportable for it: it needs
ONNX Runtime and numpy only. What it refuses, how it queues, and how a client rides out its
death (kill -9 mid-measurement) and restart."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from eas.arch.builder import build
from eas.arch.genome import Arch
from eas.measure.runtime import to_onnx
from eas_agent import client
from eas_agent.agent import Agent, Refusal
from eas_agent.measure import Limits
from tests.conftest import ROOT, assert_user_error, free_port, run_eas

pytestmark = pytest.mark.slow  # agent processes, supernet training: end-to-end

TOKEN = "test-token-0123456789"
SMALL = "stem_c8_k3_s2_relu-ds_r1_k3_s1_c16_relu-head_c0_f0_relu_d0"


def onnx_of(genome: str, input_shape=(1, 28, 28)) -> bytes:
    buffer = io.BytesIO()
    to_onnx(build(Arch.decode(genome), input_shape, 10), torch.zeros(1, *input_shape), buffer)
    return buffer.getvalue()


def blocker(folder: Path) -> Path:
    """A path entry whose `torch` and `eas` packages fail to import: what the agent must not need."""
    for name in ("torch", "eas"):
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(f"raise ImportError('the agent must not need {name}')\n")
    return folder


class AgentProcess:
    """`python -m eas_agent serve` on a free port, on core 1 where taskset and a second core exist."""

    def __init__(self, tmp_path: Path, *args: str, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp_path, self.args = tmp_path, args
        self.start()

    def start(self) -> None:
        pin = ["taskset", "-c", "1"] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
        env = {**os.environ, "EAS_AGENT_TOKEN": TOKEN, "PYTHONPATH": str(blocker(self.tmp_path / "blocked"))}
        self.log = open(self.tmp_path / f"agent-{time.monotonic_ns()}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen([*pin, sys.executable, "-m", "eas_agent", "serve", "--port",
                                         str(self.port), *self.args], cwd=self.tmp_path, env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_until(lambda: "serving" in Path(self.log.name).read_text(), "the agent to serve")

    def wait_until(self, condition, what: str, limit: float = 120.0) -> None:
        give_up = time.monotonic() + limit
        while not condition():
            assert self.process.poll() is None or what != "the agent to serve", Path(self.log.name).read_text()
            assert time.monotonic() < give_up, f"waited {limit:.0f} s for {what}"
            time.sleep(0.05)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_AGENT_TOKEN", TOKEN)
    running = AgentProcess(tmp_path)
    yield running
    running.stop()


def test_the_agent_serves_without_torch_or_eas_on_127_0_0_1_and_times_a_model(agent):
    log = Path(agent.log.name).read_text()
    assert f"on http://127.0.0.1:{agent.port}" in log
    info = client.info(agent.url)
    assert info["runtime"].startswith("onnxruntime ") and "@" in info["device"]
    answer = client.measure(agent.url, onnx_of(SMALL), threads=1, batch=8)
    single, batched = answer["single"], answer["batched"]
    assert 0 < single["p10_ms"] <= single["median_ms"] <= single["p90_ms"]
    assert batched["batch"] == 8 and batched["median_ms"] > 0
    assert answer["energy"]["source"] in ("rapl", "estimated") and answer["energy"]["joules_per_1k"] > 0
    assert answer["provenance"]["threads"] == 1 and answer["provenance"]["batch"] == [1, 8]


def test_the_older_spellings_still_reach_the_agent(agent, monkeypatch, tmp_path):
    """`eas device info --device URL` and $EAS_DEVICE_TOKEN: set-ups written before the agent had
    its own name (eas agent, --target, $EAS_AGENT_TOKEN) keep working."""
    monkeypatch.delenv("EAS_AGENT_TOKEN")
    env = {"EAS_DEVICE_TOKEN": TOKEN}
    old = run_eas("device", "info", "--device", agent.url, "--json", env=env, cwd=tmp_path)
    new = run_eas("agent", "info", "--target", agent.url, "--json", env=env, cwd=tmp_path)
    assert old.returncode == 0 and new.returncode == 0, old.stderr + new.stderr
    assert json.loads(old.stdout)["agent"] == json.loads(new.stdout)["agent"]
    assert "device" not in run_eas("--help").stdout.split("Commands")[-1]  # hidden: one name shown


def test_the_agent_refuses_a_missing_or_wrong_token(agent, monkeypatch):
    for token in ("", "wrong-token"):
        monkeypatch.setenv("EAS_AGENT_TOKEN", token)
        with pytest.raises(client.AgentRefused, match="refused the token"):
            client.info(agent.url)
        with pytest.raises(client.AgentRefused, match="refused the token"):
            client.measure(agent.url, onnx_of(SMALL), 1, 8, wait=0)


def _onnx_with_input(shape, elem) -> bytes:
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["logits"])], "g",
                              [helper.make_tensor_value_info("input", elem, shape)],
                              [helper.make_tensor_value_info("logits", elem, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_the_agent_refuses_what_it_should_in_one_line(agent, tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto

    cases = [
        (b"\x08\x07not a model at all", "not a model ONNX Runtime can run"),
        (_onnx_with_input(["batch", 3, 1024, 1024], TensorProto.FLOAT), "over the limit"),
        (_onnx_with_input(["batch", 3, 32, 32], TensorProto.INT64), "one float32 input"),
        (_onnx_with_input([1, 3, 32, 32], TensorProto.FLOAT), "dynamic batch"),
    ]
    for model, reason in cases:
        with pytest.raises(client.AgentRefused, match=reason) as refused:
            client.measure(agent.url, model, 1, 8, wait=0)
        assert "\n" not in str(refused.value)
    with pytest.raises(client.AgentRefused, match="threads must be"):
        client.measure(agent.url, onnx_of(SMALL), 999, 8, wait=0)
    small = AgentProcess(tmp_path, "--max-model-mb", "0.001")
    try:
        with pytest.raises(client.AgentRefused, match="bytes is over the limit"):
            client.measure(small.url, onnx_of(SMALL), 1, 8, wait=0)
    finally:
        small.stop()


def test_one_measurement_at_a_time_and_a_full_queue_is_refused():
    agent = Agent("t", Limits(), max_queued=1, queue_wait=600)
    model = onnx_of(SMALL)
    agent.busy.acquire()  # a measurement in progress
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(agent.measure(model, 1, 4)))
    waiting.start()
    give_up = time.monotonic() + 60
    while agent.queued < 1:
        assert time.monotonic() < give_up
        time.sleep(0.01)
    with pytest.raises(Refusal, match="busy: 1 measurements queued") as full:
        agent.measure(model, 1, 4)
    assert full.value.status == 503
    assert not answers  # still waiting behind the measurement in progress
    agent.busy.release()
    waiting.join(timeout=120)
    agent.close()
    assert answers and answers[0]["single"]["median_ms"] > 0


def test_a_measurement_over_its_time_is_stopped_and_reported():
    agent = Agent("t", Limits(), measure_timeout=0.001)
    try:
        with pytest.raises(Refusal, match="ran over") as late:
            agent.measure(onnx_of(SMALL), 1, 4)
        assert late.value.status == 504
        agent.measure_timeout = 60  # the measuring process was started again
        assert agent.measure(onnx_of(SMALL), 1, 4)["single"]["median_ms"] > 0
    finally:
        agent.close()


def test_a_client_rides_out_a_kill_9_mid_measurement_and_the_restart(agent):
    big = onnx_of("stem_c32_k3_s1_relu-ir_r4_k7_s1_e6_c64_relu-head_c1280_f0_relu_d0", (3, 64, 64))
    answers, errors = [], []

    def ask() -> None:
        try:
            answers.append(client.measure(agent.url, big, 1, 32, wait=300))
        except client.AgentError as error:
            errors.append(error)

    asking = threading.Thread(target=ask)
    asking.start()
    agent.wait_until(lambda: client.info(agent.url)["busy"], "a measurement in progress")
    agent.kill()
    agent.start()  # same port: the client's retry finds it
    asking.join(timeout=300)
    assert not errors and answers, errors
    assert answers[0]["single"]["median_ms"] > 0


def test_a_device_gone_for_longer_than_the_wait_is_a_clear_error_not_a_hang(agent):
    agent.kill()
    began = time.monotonic()
    with pytest.raises(client.AgentUnavailable, match=r"unreachable.*waited 2 s"):
        client.measure(agent.url, onnx_of(SMALL), 1, 8, wait=2)
    assert time.monotonic() - began < 60


def test_the_agent_wheel_needs_no_torch(tmp_path):
    dist, source = tmp_path / "dist", tmp_path / "eas_agent"
    shutil.copytree(ROOT / "eas_agent", source, ignore=shutil.ignore_patterns("__pycache__"))  # builds there
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(dist), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("eas_agent-*.whl"))
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith("METADATA"))
        requires = [line.split(":", 1)[1].strip().split(">")[0].split("=")[0]
                    for line in archive.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")]
        assert sorted(requires) == ["numpy", "onnxruntime"]
        assert all(n.startswith("eas_agent") for n in archive.namelist())



def _search_on(agent, tmp_path, trials: int, wait: int) -> subprocess.Popen:
    env = {**os.environ, "EAS_STUDIES_DIR": str(tmp_path / "studies"), "EAS_AGENT_TOKEN": TOKEN,
           "EAS_AGENT_WAIT": str(wait), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "eas", "search", "--space", "tiny", "--data", "digits",
                             "--epochs", "1", "--trials", str(trials), "--rungs", "1", "--sampler", "random",
                             "--no-warm-start", "--objectives", "accuracy,latency", "--study", "d", "--quiet",
                             "--target", agent.url], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _records(tmp_path):
    from eas.study.reader import StudyReader

    return StudyReader(f"sqlite:///{tmp_path / 'studies' / 'd.db'}", "d").loaded().records


@pytest.mark.slow
def test_a_search_times_on_the_agent_and_waits_out_its_kill_and_restart(agent, tmp_path):
    search = _search_on(agent, tmp_path, trials=3, wait=300)
    agent.wait_until(lambda: client.info(agent.url)["busy"], "the search's first measurement")
    agent.kill()
    agent.start()
    out, err = search.communicate(timeout=900)
    assert search.returncode == 0, err
    complete = [r for r in _records(tmp_path) if r.state == "complete"]
    assert len(complete) == 3
    for record in complete:
        assert not record.metrics.get("runtime_error")
        assert record.metrics["latency_runtime"]["url"] == agent.url
        assert "@" in record.metrics["latency_runtime"]["device"] and record.metrics["latency_ms"] > 0
    shown = subprocess.run([sys.executable, "-m", "eas", "show", "d"], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "EAS_STUDIES_DIR": str(tmp_path / "studies")})
    assert "latency and inference energy measured in onnxruntime" in shown.stdout
    assert complete[0].metrics["latency_runtime"]["device"] in shown.stdout


@pytest.mark.slow
def test_a_device_that_stays_away_leaves_each_trial_stored_with_the_reason(agent, tmp_path):
    search = _search_on(agent, tmp_path, trials=2, wait=2)
    # The first measurement is the space's largest network, for the study's reference point.
    agent.wait_until(lambda: '"POST /measure" 200' in Path(agent.log.name).read_text(),
                     "the study's reference measurement")
    agent.wait_until(lambda: client.info(agent.url)["busy"], "a trial's measurement")
    agent.kill()
    out, err = search.communicate(timeout=900)
    assert search.returncode == 0, err
    records = [r for r in _records(tmp_path) if r.state in ("complete", "infeasible")]
    assert len(records) == 2
    for record in records:
        assert "unreachable" in record.metrics["runtime_error"] and "waited 2 s" in record.metrics["runtime_error"]
        assert record.metrics.get("latency_ms") is None


@pytest.mark.slow
def test_a_device_gone_while_the_study_is_set_up_stops_the_search_and_leaves_no_study(agent, tmp_path):
    search = _search_on(agent, tmp_path, trials=2, wait=2)
    agent.wait_until(lambda: client.info(agent.url)["busy"], "the study's reference measurement")
    agent.kill()
    out, err = search.communicate(timeout=900)
    assert search.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "unreachable" in err and "extremes" in err
    from eas.study.reader import list_studies

    db = tmp_path / "studies" / "d.db"
    assert all(row.get("name") != "d" for row in (list_studies(f"sqlite:///{db}") if db.exists() else []))


def test_a_search_refuses_an_agent_it_cannot_reach_or_that_refuses_its_token(agent, tmp_path):
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies"), "EAS_AGENT_TOKEN": "wrong"}
    common = ["search", "--space", "tiny", "--data", "digits", "--trials", "1", "--study", "r", "--quiet"]
    assert_user_error(run_eas(*common, "--target", agent.url, env=env, cwd=tmp_path), "refused the token")
    agent.kill()
    env["EAS_AGENT_TOKEN"] = TOKEN
    assert_user_error(run_eas(*common, "--target", agent.url, env=env, cwd=tmp_path), "unreachable")
    assert_user_error(run_eas(*common, "--target", "http://", env=env, cwd=tmp_path), "must look like")
    assert_user_error(run_eas(*common, "--target", "http://me:secret@127.0.0.1:9", env=env, cwd=tmp_path),
                      "no credentials")
    assert_user_error(run_eas(*common, "--target", agent.url, "--runtime", "torch", env=env, cwd=tmp_path),
                      "drop --runtime torch")
    # the URL as given before --target existed: still the agent's, and not given twice
    assert_user_error(run_eas(*common, "--device", agent.url, "--runtime", "torch", env=env, cwd=tmp_path),
                      "drop --runtime torch")
    assert_user_error(run_eas(*common, "--device", agent.url, "--target", agent.url, env=env, cwd=tmp_path),
                      "give the agent's URL once")
    assert not (tmp_path / "studies" / "r.db").exists()
