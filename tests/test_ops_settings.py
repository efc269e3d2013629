"""Settings refused at start in one line naming the variable, never echoing a secret's value;
unknown GENSERVICE_* names (typos) found for a warning (docs/operator.md, "Settings checks")."""

from __future__ import annotations

import pytest

from service.config import SettingsError, load_settings, unknown_variables


@pytest.mark.parametrize("raw", ["²", "1e3", "１２", "-5", "65536", "99999999999999999999", "80.5", ""])
def test_a_bad_port_is_refused_in_one_line_naming_the_variable(raw):
    with pytest.raises(SettingsError) as e:
        load_settings(environ={"GENSERVICE_PORT": raw})
    msg = str(e.value)
    assert msg.startswith("GENSERVICE_PORT: ") and "\n" not in msg
    assert repr(raw) in msg  # not a secret: the value is shown
    assert "pydantic" not in msg and "errors.pydantic.dev" not in msg


@pytest.mark.parametrize("name,raw", [("RATE_LIMIT_BURST", "-1"), ("MAX_STREAMS_PER_KEY", "-3"),
                                      ("RETENTION_DAYS", "nan"), ("RETENTION_DAYS", "inf"),
                                      ("RETENTION_DAYS", "-1"), ("RATE_LIMIT_PER_KEY", "-0.5"),
                                      ("SMTP_PORT", "0"), ("MAX_ACTIVE_JOBS_PER_ORG", "10000000000")])
def test_negative_huge_and_not_finite_numbers_are_refused(name, raw):
    with pytest.raises(SettingsError, match=f"^GENSERVICE_{name}: "):
        load_settings(environ={f"GENSERVICE_{name}": raw})


@pytest.mark.parametrize("raw,value", [("1", True), ("0", False), ("true", True), ("True", True),
                                       ("yes", True), ("off", False)])
def test_booleans_take_the_usual_words(raw, value):
    assert load_settings(environ={"GENSERVICE_TEST_MODE": raw}).test_mode is value


@pytest.mark.parametrize("raw", ["2", "enabled", "tru"])
def test_an_unknown_boolean_is_refused(raw):
    with pytest.raises(SettingsError) as e:
        load_settings(environ={"GENSERVICE_WEBHOOK_ALLOW_PRIVATE": raw})
    assert str(e.value) == (f"GENSERVICE_WEBHOOK_ALLOW_PRIVATE: must be 1 or 0 (true/false, yes/no, on/off), "
                            f"not {raw!r}")


def test_a_refused_secret_is_never_echoed(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('stripe_secret_kye = "sk_live_SECRETVALUE"\n')  # a typo of a secret's key
    with pytest.raises(SettingsError) as e:
        load_settings(str(f), environ={})
    assert "SECRETVALUE" not in str(e.value)
    assert str(e.value) == f"stripe_secret_kye in {f}: not a setting (did you mean stripe_secret_key?)"
    with pytest.raises(SettingsError) as e:
        load_settings(environ={"GENSERVICE_SMTP_PASSWORD": "x", "GENSERVICE_OIDC_PROVIDERS": "hunter2-secret"})
    assert "hunter2" not in str(e.value) and str(e.value).startswith("GENSERVICE_OIDC_PROVIDERS: ")


def test_a_config_file_that_is_not_toml_or_missing_is_refused_in_one_line(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text("port = = 1\n")
    with pytest.raises(SettingsError, match=r"^cannot read the config file .*g\.toml: "):
        load_settings(str(f), environ={})
    with pytest.raises(SettingsError, match=r"^cannot read the config file .*nope\.toml: "):
        load_settings(str(tmp_path / "nope.toml"), environ={})


def test_a_replica_url_that_is_not_s3_is_refused_at_load():
    with pytest.raises(SettingsError, match=r"^GENSERVICE_REPLICA_URL: must be s3://BUCKET/PATH"):
        load_settings(environ={"GENSERVICE_REPLICA_URL": "s3://bucket-only"})


def test_unknown_variables_are_found_with_a_suggestion():
    env = {"GENSERVICE_PROT": "9000", "GENSERVICE_PORT": "1", "GENSERVICE_API_KEY": "client's",
           "GENSERVICE_STRIPE_SECRET": "sk_live_x", "OTHER": "1"}
    assert unknown_variables(env) == [
        "GENSERVICE_PROT is not a setting (did you mean GENSERVICE_PORT?)",
        "GENSERVICE_STRIPE_SECRET is not a setting (did you mean GENSERVICE_STRIPE_SECRET_KEY?)"]
