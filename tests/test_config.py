"""Settings: defaults, TOML file, environment over the file (operations.md)."""

import pytest
from service.config import SettingsError, load_settings


def test_defaults():
    s = load_settings(environ={})
    assert (s.host, s.port, str(s.data_dir), s.test_mode, s.webhook_allow_private) == (
        "127.0.0.1", 8000, "data", False, False)
    assert s.public_base_url == "http://127.0.0.1:8000"


def test_env_wins_over_file(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('port = 9000\nhost = "0.0.0.0"\ntest_mode = true\nbase_url = "https://gen.example"\n')
    s = load_settings(str(f), environ={"GENSERVICE_PORT": "9100", "GENSERVICE_WEBHOOK_ALLOW_PRIVATE": "1"})
    assert (s.port, s.host, s.test_mode, s.webhook_allow_private) == (9100, "0.0.0.0", True, True)
    assert s.public_base_url == "https://gen.example"


def test_test_mode_off_values():
    assert load_settings(environ={"GENSERVICE_TEST_MODE": "0"}).test_mode is False


def test_unknown_file_key_refused(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text("colour = 1\n")
    with pytest.raises(SettingsError, match="colour in .*: not a setting"):
        load_settings(str(f), environ={})
