"""Every JSON file EAS reads back is input: bounded in size and nesting, refused in one line."""

import json

import pytest

from eas.errors import UserError
from eas.jsonfile import JsonFileError, depth, read_json
from tests.conftest import assert_user_error, run_eas

DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("text, reason", [
    (DEEP, "nested deeper than 64 levels"), ("[" * 70 + "]" * 70, "deeper than 64"), ("{not json", "not JSON"),
    (b"\xff\xfe\x00", "not UTF-8")])
def test_a_damaged_json_file_is_one_line(tmp_path, text, reason):
    path = tmp_path / "x.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(JsonFileError, match=reason) as refused:
        read_json(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(refused.value, UserError) and isinstance(refused.value, ValueError)


def test_size_limit_and_depth():
    assert depth({"a": [1, {"b": []}]}) == 4 and depth(5) == 0 and depth([]) == 1


def test_a_large_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(["x" * 1000] * 1100))
    with pytest.raises(JsonFileError, match="larger than"):
        read_json(path, max_bytes=2**20)


@pytest.mark.parametrize("name", ["supernet.json", "trust.json"])
def test_deep_supernet_files_are_one_line(tmp_path, name):
    folder = tmp_path / "sn"
    folder.mkdir()
    (folder / "supernet.json").write_text("{}")
    (folder / name).write_text(DEEP)
    result = run_eas("supernet", "show", str(folder), cwd=tmp_path)
    assert_user_error(result, "supernet")


def test_a_deep_arch_json_is_one_line(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "arch.json").write_text(DEEP)
    assert_user_error(run_eas("train", str(folder), "--data", "digits", "--epochs", "1", cwd=tmp_path),
                      "nested deeper than 64 levels")


def test_a_deep_cache_header_is_rebuilt(tmp_path, monkeypatch):
    from eas.data import cache
    from eas.data.datasets import load_dataset

    monkeypatch.setenv("EAS_DATA_DIR", str(tmp_path / "data"))
    first = load_dataset("digits")
    header = next((tmp_path / "data").rglob(cache.HEADER))
    header.write_text(DEEP)
    again = load_dataset("digits")
    assert len(again.train_y) == len(first.train_y)
    assert json.loads(header.read_text())["format"]
