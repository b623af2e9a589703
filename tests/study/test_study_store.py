"""The stored study: readers never write, read incrementally, refuse newer schemas, and treat a
shared study as untrusted input (malformed or giant trials are flagged, never fatal)."""

import hashlib
import json
import math
import sqlite3

import optuna
import pytest

from eas.errors import UserError
from eas.reports.front import hypervolume, knee, pareto_front, select_trial
from eas.study import schema
from eas.study.reader import StudyReader, list_studies, load_study
from eas.study.storage import preflight
from tests.conftest import assert_user_error, run_eas
from tests.study_factory import make_study, plant

GIANT = "stem_c8192_k7_s1_relu-ir_r32_k7_s1_e16_c8192_se_relu-head_c8192_f8192_relu_d0"


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stored(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    return url, make_study(url, trials=12)


def test_readers_never_write_not_even_optunas_version_rows(tmp_path):
    path = tmp_path / "fresh.db"
    url = f"sqlite:///{path}"
    make_study(url, trials=3)
    connection = sqlite3.connect(path)
    connection.execute("DELETE FROM version_info")  # as in a file whose creator has not written them yet
    connection.execute("DELETE FROM alembic_version")
    connection.commit()
    connection.close()
    before = digest(path)
    assert len(load_study(url, "s").records) == 3
    assert [r["study"] for r in list_studies(url)] == ["s"]
    assert digest(path) == before
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT COUNT(*) FROM version_info").fetchone() == (0,)


def test_a_study_being_created_is_reported_not_a_crash(tmp_path):
    path = tmp_path / "new.db"
    sqlite3.connect(path).execute("CREATE TABLE studies (study_id INTEGER PRIMARY KEY, study_name TEXT)").close()
    with pytest.raises(UserError, match="still being created"):
        StudyReader(f"sqlite:///{path}", "s")
    url = f"sqlite:///{tmp_path / 'half.db'}"
    storage = optuna.storages.RDBStorage(url)
    optuna.create_study(study_name="s", storage=storage, directions=["maximize", "minimize"])  # no settings yet
    with pytest.raises(UserError, match="still being created"):
        load_study(url, "s")
    assert list_studies(url) == []


def test_polling_reads_only_what_changed(stored):
    url, study = stored
    reader = StudyReader(url, "s")
    assert len(reader.poll()) == 12
    assert reader.poll() == []
    trial = study.ask()
    assert [r.state for r in reader.poll()] == ["running"]
    study.tell(trial, [0.5, 1000, 100, 0.1])
    changed = reader.poll()
    assert [(r.number, r.state) for r in changed] == [(12, "complete")]
    assert len(reader.loaded().records) == 13


def test_a_newer_schema_is_refused_clearly(stored):
    url, study = stored
    study.set_user_attr(schema.SCHEMA, schema.SCHEMA_VERSION + 1)
    with pytest.raises(UserError, match="newer EAS"):
        load_study(url, "s")


def test_a_study_of_the_first_eas_has_schema_1_and_reads(stored):
    url, study = stored
    study._storage.set_study_user_attr(study._study_id, schema.SCHEMA, None)
    assert load_study(url, "s").schema_version == 1


def test_a_study_stored_with_the_evolution_samplers_old_name_keeps_that_sampler(stored):
    from eas.nas.proposals import SAMPLERS

    _, study = stored
    settings = {**study.user_attrs[schema.SETTINGS], "sampler": "eas"}  # what EAS stored before TPE was the default
    assert schema.SearchSettings.from_dict(settings).sampler == "evolution" and "evolution" in SAMPLERS


@pytest.mark.parametrize("genome, metrics, problem", [
    ("stem_broken", {"accuracy": 1.0, "macs": 1, "params": 1, "inference_energy_j_per_1k": 0.0}, "unusable"),
    (GIANT, {"accuracy": 1.0, "macs": 1, "params": 1, "inference_energy_j_per_1k": 0.0}, "too large"),
    (12345, {"accuracy": 1.0}, "not a string"),
    ("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0", {"accuracy": "high", "macs": 1}, "not a number"),
    ("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0", ["not", "a", "dict"], "not a mapping"),
])
def test_a_planted_trial_is_flagged_and_skipped(stored, genome, metrics, problem):
    url, study = stored
    honest = load_study(url, "s")
    honest_knee = knee(pareto_front(honest.records, honest.objectives), honest.objectives)
    plant(study, genome, metrics)
    loaded = load_study(url, "s")
    broken = [r for r in loaded.records if r.state == "broken"]
    assert len(broken) == 1 and problem in broken[0].reason
    front = pareto_front(loaded.records, loaded.objectives)
    assert broken[0].number not in {r.number for r in front}
    assert knee(front, loaded.objectives).number == honest_knee.number
    assert select_trial(loaded.records, loaded.objectives, pick="knee").number == honest_knee.number
    assert math.isfinite(hypervolume(loaded.records, loaded.objectives, loaded.reference))


def test_a_giant_stored_input_shape_is_a_clear_error(stored):
    url, study = stored
    settings = dict(study.user_attrs[schema.SETTINGS], input_shape=[1, 60000, 60000])
    study.set_user_attr(schema.SETTINGS, settings)
    with pytest.raises(UserError, match="out of range"):
        load_study(url, "s")


@pytest.mark.slow
def test_cli_readers_on_a_hostile_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'studies' / 'h.db'}"
    (tmp_path / "studies").mkdir()
    study = make_study(url, "h", trials=8)
    plant(study, GIANT, {"accuracy": 1.0, "macs": 1, "params": 1, "inference_energy_j_per_1k": 0.0})
    plant(study, "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0",
          {"accuracy": 0.1, "macs": 10**9, "params": 10**9, "inference_energy_j_per_1k": 9.0},
          reason="\x1b[2J\x1b[31mowned ![i](http://host/track.png)")
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    shown = run_eas("show", "h", env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "1 broken" in shown.stdout, shown.stderr
    listed = run_eas("studies", env=env, cwd=tmp_path)  # counts by SQL: it does not validate every trial
    assert listed.returncode == 0 and "h " in listed.stdout, listed.stderr
    one = run_eas("show", "h", "--trial", "9", env=env, cwd=tmp_path)
    assert one.returncode == 0 and "\x1b" not in one.stdout and "\\u001b" in one.stdout
    as_json = json.loads(run_eas("show", "h", "--json", env=env, cwd=tmp_path).stdout)
    assert [b["trial"] for b in as_json["broken"]] == [8]


FOREIGN_SCHEMAS = {
    "unrelated": ["CREATE TABLE users (id INTEGER, name TEXT)", "INSERT INTO users VALUES (1, 'ada')"],
    "a studies table": ["CREATE TABLE studies (id INTEGER, title TEXT)", "INSERT INTO studies VALUES (1, 'math')"],
    "its own alembic": ["CREATE TABLE alembic_version (version_num TEXT)", "INSERT INTO alembic_version VALUES ('x1')",
                        "CREATE TABLE orders (id INTEGER)"],
    "optuna look-alike": ["CREATE TABLE studies (study_id INTEGER, study_name TEXT)",
                          "CREATE TABLE trials (trial_id INTEGER, number INTEGER, study_id INTEGER, state TEXT)",
                          "CREATE TABLE version_info (version_info_id INTEGER, schema_version INTEGER, "
                          "library_version TEXT)", "INSERT INTO version_info VALUES (1, 12, '5.1.0')"],
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(FOREIGN_SCHEMAS))
@pytest.mark.parametrize("queue", [False, True])
def test_storage_of_another_application_is_never_written(tmp_path, kind, queue):
    """Decided by Optuna's own version table and schema: a file of another application that has a
    table named `studies`, an alembic_version of its own, or part of Optuna's layout is refused in
    one line and left byte-identical."""
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        for statement in FOREIGN_SCHEMAS[kind]:
            connection.execute(statement)
    before = path.read_bytes()
    with pytest.raises(UserError, match="another application"):
        preflight(f"sqlite:///{path}")
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--trials", "1", "--storage",
                     f"sqlite:///{path}", "--quiet", *(["--queue"] if queue else []), cwd=tmp_path)
    assert_user_error(result, "another application")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


@pytest.mark.slow
@pytest.mark.parametrize("command", [["show", "x"], ["studies"], ["export", "x", "--pick", "knee", "--out", "o"]])
def test_read_only_commands_with_the_server_down_say_so_in_one_line(tmp_path, command):
    result = run_eas(*command, "--storage", "postgresql://postgres:secret@127.0.0.1:1/x", cwd=tmp_path)
    assert_user_error(result, "cannot open storage")
    assert "secret" not in result.stderr


@pytest.mark.parametrize("url", ["postgresql://me:hunter2@host:notaport/db", "postgresql://me:hun/ter2@127.0.0.1:1/db",
                                 "postgresql://me:hun@ter2@127.0.0.1:1/db", "postgresql://me:h:u/n@t@er2@host:x/db",
                                 "postgresql://me@127.0.0.1:1/db?password=hunter2"])
@pytest.mark.slow
@pytest.mark.parametrize("command", [["show", "x"], ["search", "--space", "tiny", "--data", "digits", "--trials", "1"]])
def test_a_malformed_url_never_echoes_its_password(tmp_path, url, command):
    """Whatever the URL's shape ('/', ':' or an unencoded '@' in the password): masked."""
    result = run_eas(*command, "--storage", url, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    for fragment in ("hunter2", "ter2", "er2"):
        assert fragment not in result.stderr


def test_a_study_whose_setup_fails_does_not_poison_its_name(tmp_path):
    """An error while a new study is set up (here: its reference point) removes the half-made
    study, so the correct command works afterwards instead of failing with 'still being created'."""
    from eas.study.reader import StudyReader
    from eas.study.setup import create_or_resume
    from eas.study.storage import open_storage
    from tests.study_factory import settings

    url = f"sqlite:///{tmp_path / 'p.db'}"
    storage = open_storage(url)

    def broken_reference():
        raise UserError("no such meter")

    with pytest.raises(UserError, match="no such meter"):
        create_or_resume(storage, "p", settings(), broken_reference)
    assert "p" not in [s.study_name for s in optuna.get_all_study_summaries(storage)]
    study, created = create_or_resume(storage, "p", settings(), lambda: {"macs": 1e6})
    assert created and StudyReader(url, "p").settings["data"] == "digits"


def test_studies_backup_copies_each_study_file_whole_while_it_is_open(tmp_path):
    """`eas studies --backup DIR`: SQLite's backup API, so the copy is complete and consistent
    even while a writer holds the study open with a write-ahead log."""
    import sqlite3 as sqlite

    from tests.study_factory import add_trials, make_study

    (tmp_path / "studies").mkdir()
    url = f"sqlite:///{tmp_path / 'studies' / 'b.db'}"
    study = make_study(url, "b", trials=3)
    writer = sqlite.connect(tmp_path / "studies" / "b.db")
    writer.execute("PRAGMA journal_mode=WAL")
    add_trials(study, 2, seed=1)  # written into the log while `writer` keeps the file open
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    result = run_eas("studies", "--backup", str(tmp_path / "copies"), env=env, cwd=tmp_path)
    writer.close()
    assert result.returncode == 0, result.stderr
    copied = optuna.load_study(study_name="b", storage=f"sqlite:///{tmp_path / 'copies' / 'b.db'}")
    assert len(copied.trials) == 5
    assert_user_error(run_eas("studies", "--backup", str(tmp_path / "copies"), env=env, cwd=tmp_path), "exists")


def test_a_storage_of_another_optuna_layout_is_read_through_optunas_public_api(tmp_path):
    import sqlite3

    from eas.study.reader import StudyReader, list_studies
    from tests.study_factory import make_study

    db = tmp_path / "v.db"
    url = f"sqlite:///{db}"
    study = make_study(url, "v", trials=6)
    study.add_trial(optuna.trial.create_trial(values=[0.5, 1.0, 1.0, 1.0], user_attrs={
        "genome": "not a genome", "metrics": {"accuracy": 7.0}, "status": "ok"}))  # broken on both paths
    by_sql = StudyReader(url, "v")
    assert by_sql._optuna is None
    expected = by_sql.loaded().records
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE version_info SET schema_version = 13, library_version = '6.0.0'")
    public = StudyReader(url, "v")
    assert public._optuna is not None
    assert public.loaded().records == expected and expected[-1].state == "broken"
    assert public.poll() == []  # nothing changed since: nothing new
    assert public.params(expected[0]) == by_sql.params(expected[0])
    (row,) = list_studies(url)
    assert "storage layout 13 (written by Optuna 6.0.0)" in row["error"]
