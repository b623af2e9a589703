"""Load test of the worker pool on the real PostgreSQL server: 8 `eas worker --storage URL`
processes serve 3 queued studies (tiny space on digits, 9 optimiser steps in 2 rungs) of 700
trials each. A quarter of the way in, one worker is killed with SIGKILL; half way, one of the
workers' PostgreSQL connections is terminated by the server (pg_terminate_backend). Then it
checks that no trial was lost (none left running or waiting; the killed worker's trial failed by
heartbeat and retried once), none ran twice, each study ended within its trials budget, and the
number of connections stayed bounded. Baseline in the same run: one worker alone, 60 trials.

    python benchmarks/pool_load.py [--workers 8] [--trials 700] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import optuna
import sqlalchemy

from eas.units import table

QUEUE = ("--space", "tiny", "--data", "digits", "--epochs", "1", "--max-steps", "9", "--rungs", "2", "--eta", "3",
         "--no-warm-start", "--quiet", "--queue", "--heartbeat", "2")


def queue(url: str, name: str, trials: int) -> None:
    subprocess.run([sys.executable, "-m", "eas", "search", *QUEUE, "--study", name, "--storage", url,
                    "--trials", str(trials)], check=True)


def worker(url: str, seed: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "eas", "worker", "--storage", url, "--heartbeat", "2",
                             "--threads", "1", "--quiet", "--seed", str(seed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finished(monitor, names) -> int:
    return monitor.execute(sqlalchemy.text(
        "SELECT COUNT(*) FROM trials t JOIN studies s ON s.study_id = t.study_id WHERE s.study_name IN :n "
        "AND t.state IN ('COMPLETE', 'PRUNED', 'FAIL')").bindparams(sqlalchemy.bindparam("n", expanding=True)),
        {"n": list(names)}).scalar()


def connections(monitor) -> int:
    return monitor.execute(sqlalchemy.text(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    ).scalar()


def run(url: str, names: list[str], trials: int, workers: int, disturb: bool) -> dict:
    for name in names:
        queue(url, name, trials)
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    total = trials * len(names)
    processes = [worker(url, seed) for seed in range(workers)]
    started, peak, events = time.monotonic(), 0, []
    killed = dropped = None
    with engine.connect() as monitor:
        while any(p.poll() is None for p in processes):
            time.sleep(0.5)
            done = finished(monitor, names)
            peak = max(peak, connections(monitor))
            if disturb and killed is None and done >= total // 4:
                killed = random.choice(processes)
                killed.send_signal(signal.SIGKILL)
                events.append(f"{time.monotonic() - started:.0f} s: SIGKILL to worker pid {killed.pid}")
            if disturb and dropped is None and done >= total // 2:
                dropped = monitor.execute(sqlalchemy.text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND state = 'idle' ORDER BY random() LIMIT 1")).scalar()
                if dropped is not None:
                    monitor.execute(sqlalchemy.text("SELECT pg_terminate_backend(:p)"), {"p": dropped})
                    events.append(f"{time.monotonic() - started:.0f} s: server dropped connection {dropped}")
    wall = time.monotonic() - started
    errors = [p.stderr.read().strip().splitlines()[-1:] for p in processes if p is not killed and p.returncode]
    return {"wall": wall, "peak": peak, "events": events, "errors": errors, "killed": killed,
            **check(url, names, trials, workers)}


def check(url: str, names: list[str], trials: int, workers: int) -> dict:
    storage = optuna.storages.RDBStorage(url)
    result = {"trials": 0, "complete": 0, "left_running": 0, "failed": 0, "retried": 0, "unretried": [],
              "twice": 0, "over_budget": [], "cached": 0}
    for name in names:
        study = optuna.load_study(study_name=name, storage=storage)
        all_trials = study.trials
        result["trials"] += len(all_trials)
        result["complete"] += sum(t.state.name in ("COMPLETE", "PRUNED") for t in all_trials)
        result["cached"] += sum("cached_from" in t.user_attrs for t in all_trials)
        result["left_running"] += sum(t.state.name in ("RUNNING", "WAITING") for t in all_trials)
        retried = {t.system_attrs["failed_trial"] for t in all_trials if "failed_trial" in t.system_attrs}
        for trial in all_trials:
            if trial.state.name == "FAIL":
                result["failed"] += 1
                if trial.number in retried:
                    result["retried"] += 1
                else:
                    result["unretried"].append(f"{name}#{trial.number}: {trial.user_attrs.get('reason')}")
                if trial.user_attrs.get("status") in ("ok", "stopped", "infeasible"):
                    result["twice"] += 1  # a failed trial whose worker still finished it
        counted = sum(t.state.name != "FAIL" for t in all_trials)
        if not trials <= counted <= trials + workers - 1:
            result["over_budget"].append(f"{name}: {counted}")
        optuna.delete_study(study_name=name, storage=storage)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=os.environ.get("EAS_BENCH_POSTGRES_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--studies", type=int, default=3)
    parser.add_argument("--trials", type=int, default=700, help="per study")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:6]
    base = run(args.url, [f"load-base-{tag}"], 60, 1, disturb=False)
    load = run(args.url, [f"load-{tag}-{k}" for k in range(args.studies)], args.trials, args.workers, disturb=True)
    rate = {k: r["complete"] / r["wall"] for k, r in (("base", base), ("load", load))}
    print(f"\n{args.workers} pool workers, {args.studies} studies x {args.trials} trials on {args.url.split('@')[-1]} "
          f"(2 cores; tiny space on digits, 9 steps in 2 rungs)\n")
    for event in load["events"]:
        print("  " + event)
    print()
    print(table([
        ["1 worker, 1 study (baseline)", base["trials"], f"{base['wall']:.0f}", f"{rate['base']:.2f}", "1.00x",
         base["peak"], base["failed"], base["left_running"], base["twice"]],
        [f"{args.workers} workers, {args.studies} studies, kill -9 + dropped connection", load["trials"],
         f"{load['wall']:.0f}", f"{rate['load']:.2f}", f"{rate['load'] / rate['base']:.2f}x", load["peak"],
         f"{load['failed']} ({load['retried']} retried)", load["left_running"], load["twice"]],
    ], ["run", "trials", "wall s", "trials/s", "ratio", "max connections", "failed", "left running", "ran twice"]))
    print(f"\nreused results (genome evaluated before): {load['cached']}; studies outside their trials budget: "
          f"{load['over_budget'] or 'none'}; workers that exited with an error: {load['errors'] or 'none'}")
    if load["unretried"]:
        print("failed and not retried: " + "; ".join(load["unretried"][:5]))
    ok = not (load["left_running"] or load["twice"] or load["over_budget"] or load["errors"] or load["unretried"])
    print("\nresult: " + ("no trial lost, none ran twice, every study within its budget" if ok else "PROBLEMS above"))


if __name__ == "__main__":
    main()
