import pytest
from django.core.exceptions import ImproperlyConfigured

from durablecache import env


def test_typed_helpers_parse_and_refuse(monkeypatch):
    monkeypatch.setenv("X_INT", "7")
    monkeypatch.setenv("X_BOOL", "yes")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env.env_int("X_INT", 1) == 7
    assert env.env_bool("X_BOOL", False) is True
    assert env.env_list("X_LIST") == ["a", "b", "c"]
    assert env.env_float("X_MISSING", 1.5) == 1.5
    monkeypatch.setenv("X_INT", "seven")
    with pytest.raises(ImproperlyConfigured):
        env.env_int("X_INT", 1)
    monkeypatch.setenv("X_BOOL", "perhaps")
    with pytest.raises(ImproperlyConfigured):
        env.env_bool("X_BOOL", False)


def test_database_config_defaults_to_sqlite_with_wal(tmp_path):
    config = env.database_config("", sqlite_default_path=str(tmp_path / "x.sqlite3"))
    # Django's SQLite backend with in-process writers queued
    # (durablecache.server.sqlite3)
    assert config["ENGINE"] == "durablecache.server.sqlite3"
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    pg = env.database_config(
        "postgres://u@127.0.0.1:5432/db", sqlite_default_path="unused"
    )
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert pg["NAME"] == "db"


def test_choice_is_one_of_its_values_or_a_clear_error(monkeypatch):
    choices = ("text", "json")
    assert env.env_choice("X_CHOICE", "text", choices) == "text"
    monkeypatch.setenv("X_CHOICE", " JSON ")
    assert env.env_choice("X_CHOICE", "text", choices) == "json"
    monkeypatch.setenv("X_CHOICE", "xml")
    with pytest.raises(ImproperlyConfigured, match="one of text, json, got 'xml'"):
        env.env_choice("X_CHOICE", "text", choices)
