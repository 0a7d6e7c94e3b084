"""The CLI context file (docs/cli.md, "CLI context"): where serve writes it, how commands find it, and the
URL a local command reaches a server by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factoryctl.cli import with_context
from factoryctl.context_file import ContextError, find, server_url, write


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),  # every address: reached on loopback
        ("::", "http://[::1]:8080"),
        ("::1", "http://[::1]:8080"),
        ("factory.internal", "http://factory.internal:8080"),
    ],
)
def test_server_url(host: str, url: str) -> None:
    assert server_url(host, 8080) == url


def test_a_data_dir_below_the_working_directory_gets_a_local_pointer(tmp_path: Path) -> None:
    data = tmp_path / ".factory" / "demo"
    written = write(data, "http://127.0.0.1:1", data / "admin.key", tmp_path)
    assert written == [data / "context.json", tmp_path / ".factory" / "context.json"]
    assert json.loads(written[0].read_text()) == json.loads(written[1].read_text())
    assert [p.name for p in data.iterdir()] == ["context.json"]  # no temporary file left behind


def test_the_default_data_dir_and_one_elsewhere_get_one_file(tmp_path: Path) -> None:
    local = tmp_path / ".factory"
    assert write(local, "http://x:1", local / "admin.key", tmp_path) == [local / "context.json"]
    elsewhere = tmp_path / "srv"
    work = tmp_path / "work"
    assert write(elsewhere, "http://x:1", elsewhere / "k", work) == [elsewhere / "context.json"]
    assert not work.exists()


def test_found_from_below_and_filling_only_unset_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / ".factory" / "demo"
    write(data, "http://127.0.0.1:9", data / "admin.key", tmp_path)
    deeper = tmp_path / "a" / "b"
    deeper.mkdir(parents=True)
    found = find(deeper, None)
    assert found is not None and found.path == tmp_path / ".factory" / "context.json"
    monkeypatch.chdir(deeper)
    env = with_context({"FACTORY_API_URL": "http://given:1", "FACTORY_DATA_DIR": ""}, None)
    assert env == {
        "FACTORY_API_URL": "http://given:1",  # a variable wins
        "FACTORY_DATA_DIR": str(data),  # an empty one is unset
        "FACTORY_API_KEY_FILE": str(data / "admin.key"),
    }
    assert with_context({}, "none") == {}
    assert with_context({"FACTORY_CONTEXT": "none"}, None) == {"FACTORY_CONTEXT": "none"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cannot read context file"),
        ('{"version": 2}', "is not a version 1 context"),
        ('{"version": 1, "server": 3}', "server must be a string"),
    ],
)
def test_a_broken_file_is_an_error_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "context.json"
    path.write_text(content)
    with pytest.raises(ContextError, match=message):
        find(tmp_path, str(path))
    with pytest.raises(ContextError, match="does not exist"):
        find(tmp_path, str(tmp_path / "nope.json"))
