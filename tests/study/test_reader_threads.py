"""A study read from many threads at once, as the explorer's Streamlit threads read it."""

import eas
from eas.study.reader import StudyReader


def test_readers_in_many_threads_leave_no_connection_error(tmp_path, monkeypatch, caplog):
    """The explorer reads a study from Streamlit's threads: each read's SQLite connection is
    opened and closed in its own thread (77 'SQLite objects created in a thread' errors here
    with the pool that kept one connection per thread and closed them from others)."""
    import logging
    import threading

    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    result = eas.search(space="tiny", data="digits", trials=2, study="threads", warm_start=False, sampler="random",
                        evaluator=lambda arch: 0.6)
    failures = []

    def read() -> None:
        try:
            for _ in range(5):
                StudyReader(result.storage, "threads").loaded()
        except Exception as error:  # noqa: BLE001 - any error in a thread is the finding
            failures.append(error)

    with caplog.at_level(logging.WARNING, logger="sqlalchemy"):
        threads = [threading.Thread(target=read) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == [] and [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy")] == []
