"""An agent's answer is input: a search stores no number an agent made up."""

import copy
import json
import math
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eas.errors import UserError
from eas.measure.runtime import Runtime, Untrusted, agent_wait, checked_answer
from tests.conftest import assert_user_error, run_eas

RUNTIME = Runtime("onnxruntime", 1, 32, "http://127.0.0.1:9")
GOOD = {"single": {"batch": 1, "median_ms": 0.5, "p10_ms": 0.4, "p90_ms": 0.6, "repeats": 50},
        "batched": {"batch": 32, "median_ms": 9.0, "p10_ms": 8.5, "p90_ms": 9.5, "repeats": 5},
        "energy": {"joules_per_1k": 1.2, "seconds_per_1k": 0.3, "source": "estimated"},
        "provenance": {"runtime": "onnxruntime 1.32.0", "provider": "CPUExecutionProvider", "threads": 1,
                       "batch": [1, 32], "device": "cpu:Cortex-A72 @ pi"}}


def changed(path: str, value):
    answer = copy.deepcopy(GOOD)
    *keys, last = path.split(".")
    target = answer
    for key in keys:
        target = target[key]
    target[last] = value
    return answer


NONSENSE = {
    "latency 1e300": (changed("single.median_ms", 1e300), "outside"),
    "latency 0": (changed("single.median_ms", 0), "outside"),
    "latency true": (changed("single.median_ms", True), "not a finite number"),
    "latency NaN": (changed("single.p10_ms", math.nan), "not a finite number"),
    "p10 above p90": (changed("single.p10_ms", 0.7), "out of order"),
    "batched at another batch": (changed("batched.batch", 8), "not 32"),
    "runtime with escapes": (changed("provenance.runtime", "\x1b[2J" + "x" * 200_000), "printable"),
    "device missing": (changed("provenance.device", None), "printable"),
    "other threads": (changed("provenance.threads", 4), "thread"),
    "energy source made up": (changed("energy.source", "measured!"), "energy source"),
    "negative energy": (changed("energy.joules_per_1k", -1.0), "outside"),
    "not an object": ([1, 2, 3], "not a JSON object"),
}


def test_a_sound_answer_is_kept_with_where_it_came_from():
    measured = checked_answer(GOOD, RUNTIME)
    assert measured.single.median_ms == 0.5 and measured.batched.batch == 32
    assert measured.provenance["device"] == "cpu:Cortex-A72 @ pi" and measured.provenance["url"] == RUNTIME.target


def test_the_target_is_stored_under_its_first_name_so_older_studies_read_alike():
    stored = RUNTIME.to_dict()
    assert stored["device"] == RUNTIME.target and "target" not in stored
    assert Runtime.from_dict(stored) == RUNTIME


@pytest.mark.parametrize("case", sorted(NONSENSE))
def test_nonsense_is_a_failed_measurement_with_the_reason(case):
    answer, reason = NONSENSE[case]
    with pytest.raises(Untrusted, match=reason) as refused:
        checked_answer(answer, RUNTIME)
    assert "cannot trust" in str(refused.value) and "\n" not in str(refused.value)
    assert len(str(refused.value)) < 400


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "1e9", "soon"])
def test_a_agent_wait_that_makes_no_sense_is_refused(value, monkeypatch):
    monkeypatch.setenv("EAS_AGENT_WAIT", value)
    with pytest.raises(UserError, match="EAS_AGENT_WAIT"):
        agent_wait()


class LyingAgent:
    """An HTTP server that speaks the agent's protocol: a sound first measurement (the study's
    reference point), then one piece of nonsense after another."""

    def __init__(self):
        answers = [GOOD, *(answer for answer, _ in NONSENSE.values())]
        served = {"n": 0}

        class Handler(BaseHTTPRequestHandler):
            def _send(self, document) -> None:
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send({"agent": "liar", "limits": {}})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                answer = answers[min(served["n"], len(answers) - 1)]
                served["n"] += 1
                self._send(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.slow
def test_a_search_against_a_lying_agent_stores_no_nonsense(tmp_path):
    liar = LyingAgent()
    env = {**os.environ, "EAS_STUDIES_DIR": str(tmp_path / "studies"), "EAS_AGENT_TOKEN": "t",
           "EAS_AGENT_WAIT": "0"}
    done = subprocess.run([sys.executable, "-m", "eas", "search", "--space", "tiny", "--data", "digits", "--epochs",
                           "1", "--trials", "5", "--rungs", "1", "--sampler", "random", "--no-warm-start",
                           "--objectives", "accuracy,latency", "--study", "liar", "--quiet", "--target", liar.url],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    liar.server.shutdown()
    assert done.returncode == 0, done.stderr
    from eas.study.reader import StudyReader

    records = StudyReader(f"sqlite:///{tmp_path / 'studies' / 'liar.db'}", "liar").loaded().records
    assert len(records) == 5
    for record in records:
        assert record.metrics.get("latency_ms") is None
        assert "cannot trust" in record.metrics["runtime_error"]
        assert "\x1b" not in json.dumps(record.metrics)


def test_a_search_refuses_a_agent_wait_that_makes_no_sense(tmp_path):
    liar = LyingAgent()
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies"), "EAS_AGENT_TOKEN": "t", "EAS_AGENT_WAIT": "inf"}
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--trials", "1", "--study", "w",
                     "--target", liar.url, env=env, cwd=tmp_path)
    liar.server.shutdown()
    assert_user_error(result, "EAS_AGENT_WAIT")
    assert not (tmp_path / "studies" / "w.db").exists()


def test_deciles_of_a_few_skewed_repeats_stay_within_what_was_measured(monkeypatch):
    """Under load a batch may be timed only 3 times: its p10 must not be extrapolated below the
    fastest repeat (seen: -0.046 ms, which a search rightly refused as untrusted)."""
    from eas_agent import measure

    clock = iter([0.0, 0.0, 0.005, 1.0, 1.1, 2.0, 2.3, 9.0])  # repeats of 5, 100 and 300 ms, then over time
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(clock))
    latency = measure.time_repeated(lambda: None, batch=32, warmup=0, repeats=30, max_seconds=0.5)
    assert latency.repeats == 3 and latency.median_ms == pytest.approx(100.0)
    assert 5.0 <= latency.p10_ms <= latency.median_ms <= latency.p90_ms <= 300.0
