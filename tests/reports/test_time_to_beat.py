"""Time to beat the hand-designed networks: which searched network beat each baseline first, and
how much search time that took (pauses between runs and the baselines' own training not counted)."""

import math

import pytest

from eas.reports.time_to_beat import search_seconds, time_to_beat, time_to_beat_lines
from eas.study import schema
from eas.study.records import BaselineRecord, TrialRecord, baseline_records


def trial(number, started, finished, accuracy=0.5, latency=1.0, macs=1e6, state="complete"):
    return TrialRecord(number, state, f"g{number}", {"accuracy": accuracy, "latency_ms": latency, "macs": macs,
                                                     "evaluate_cpu_seconds": 2.0}, started=started, finished=finished)


def baseline(name, accuracy, latency=2.0, macs=2e6, status="ok"):
    metrics = {"status": status, "accuracy": accuracy, "latency_ms": latency, "macs": macs}
    return BaselineRecord(name, metrics, 0.0, 1.0)


def test_search_time_is_the_trials_spans_with_short_gaps_bridged_and_pauses_left_out():
    # 0-10, a 5 s gap (sampling), 15-20; then a 10-minute pause; 620-650, with a trial still running
    records = [trial(0, 1000, 1010), trial(1, 1015, 1020), trial(2, 1620, 1640), trial(3, 1630, None)]
    assert search_seconds(records, until=1650) == pytest.approx(20 + 30)
    assert search_seconds(records, until=1018) == pytest.approx(18)  # counted up to `until` only
    assert search_seconds([], until=5) == 0.0


def test_a_baseline_is_beaten_by_the_first_finished_network_more_accurate_at_no_more_latency():
    records = [
        trial(0, 0, 10, accuracy=0.90, latency=3.0),                  # more accurate but slower
        trial(1, 10, 20, accuracy=0.79, latency=1.0),                 # faster but less accurate
        trial(2, 20, 30, accuracy=0.95, latency=1.0, state="stopped"),  # not trained to the full fidelity
        trial(3, 30, 50, accuracy=0.81, latency=2.0),                 # beats it: equal latency counts
        trial(4, 25, 40, accuracy=0.85, latency=1.5, state="infeasible"),  # over a limit
        trial(5, 50, 60, accuracy=0.99, latency=0.5),
    ]
    [found] = time_to_beat(records, {"b": baseline("b", 0.80, latency=2.0)})
    assert (found.trial, found.cost, found.trials) == (3, "latency_ms", 5)  # trials 0-4 had finished by 50
    assert found.seconds == pytest.approx(50) and found.cpu_seconds == pytest.approx(5 * 2.0)


def test_without_a_measured_latency_the_cost_compared_is_macs():
    records = [trial(0, 0, 10, accuracy=0.9, latency=9.0, macs=1e6), trial(1, 10, 20, accuracy=0.9, macs=5e6)]
    [found] = time_to_beat(records, {"b": baseline("b", 0.8, latency=None, macs=2e6)})
    assert (found.cost, found.trial) == ("macs", 0)


def test_the_most_accurate_baseline_leads_failed_ones_trail_and_not_yet_counts_until_now():
    records = [trial(0, 0, 10, accuracy=0.7, latency=1.0)]
    found = time_to_beat(records, {"low": baseline("low", 0.6), "cut": baseline("cut", None, status="cut"),
                                   "high": baseline("high", 0.9)}, now=70)
    assert [f.baseline for f in found] == ["high", "low", "cut"]
    high, low, cut = found
    assert high.trial is None and high.seconds == pytest.approx(10) and high.trials == 1
    assert low.trial == 0 and cut.trial is None and math.isnan(cut.accuracy)
    text = "\n".join(time_to_beat_lines(found, "onnxruntime, 1 thread"))
    assert "time to beat the best baseline (high, 90.00% at 2 ms): not yet, after 0m10s of search (0m02s CPU), " \
           "1 trial" in text
    assert "cut" in text and "trial 0" in text


def test_stored_baselines_that_cannot_be_trusted_are_left_out():
    good = {"metrics": {"status": "ok", "accuracy": 0.8, "macs": 1000}, "started": 1.0, "finished": 2.0}
    attrs = {schema.BASELINE + "mobilenet_v2@0.5": good,
             schema.BASELINE + "mobilenet_v2@0.5:adapted": good,
             schema.BASELINE + "resnet@1.0": good,                                        # not a known network
             schema.BASELINE + "mobilenet_v2@0.75": {**good, "metrics": {"accuracy": 7.0}},  # out of range
             schema.BASELINE + "mobilenet_v2@1.0": {**good, "finished": "yesterday"},
             schema.BASELINE + "mobilenet_v3_small@0.5": [1, 2],
             "eas.settings": good}
    found = baseline_records(attrs, ((1, 28, 28), 10))
    assert sorted(found) == ["mobilenet_v2@0.5", "mobilenet_v2@0.5:adapted"]
    assert found["mobilenet_v2@0.5"].value("accuracy") == 0.8
