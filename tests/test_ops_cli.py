"""`genservice` at a shell: a bad setting or a bad backup is one line and an exit code, never a
traceback; every command's --help works; a typo'd GENSERVICE_* name is warned about."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from service.cli import build_parser


def run(tmp_path, *argv, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GENSERVICE_", "AWS_"))}
    environ.update({"GENSERVICE_DATA_DIR": str(tmp_path / "data"), **env})
    return subprocess.run([sys.executable, "-m", "service", *argv], env=environ, capture_output=True, text=True,
                          timeout=120)


def test_serve_with_a_bad_port_is_one_line_and_exit_2(tmp_path):
    done = run(tmp_path, "serve", GENSERVICE_PORT="²")
    assert done.returncode == 2
    assert done.stderr == ("genservice: GENSERVICE_PORT: input should be a valid integer, unable to parse string "
                           "as an integer, not '²'\n")


def test_serve_refusal_of_a_secret_does_not_echo_it(tmp_path):
    cfg = tmp_path / "g.toml"
    cfg.write_text('smtp_pasword = "hunter2-value"\n')
    done = run(tmp_path, "--config", str(cfg), "serve")
    assert done.returncode == 2
    assert done.stderr == f"genservice: smtp_pasword in {cfg}: not a setting (did you mean smtp_password?)\n"


@pytest.mark.parametrize("command", [["admin", "backup", "x"], ["admin", "restore", "x"],
                                     ["admin", "restore-replica", "x"]])
def test_admin_commands_refuse_bad_settings_in_one_line(tmp_path, command):
    done = run(tmp_path, *command, GENSERVICE_RETENTION_DAYS="nan")
    assert done.returncode == 2
    assert done.stderr == "genservice: GENSERVICE_RETENTION_DAYS: input should be a finite number, not 'nan'\n"


def test_admin_restore_of_a_damaged_backup_is_one_line_and_exit_1(tmp_path):
    src = tmp_path / "b"
    src.mkdir()
    (src / "backup.json").write_text("{}")
    (src / "genservice.db").write_bytes(b"garbage" * 500)
    done = run(tmp_path, "admin", "restore", str(src))
    assert done.returncode == 1
    assert done.stderr == (f"restore failed: {src / 'genservice.db'} is damaged or truncated: "
                           "not a usable SQLite database\n")
    assert not (tmp_path / "data").exists()


def test_a_typo_in_a_variable_name_is_warned_about_without_its_value(tmp_path):
    bad = tmp_path / "catalog.toml"
    bad.write_text("[[models]]\nid = 1\n")  # stops `serve` right after the settings checks
    done = run(tmp_path, "serve", GENSERVICE_CATALOG_FILE=str(bad), GENSERVICE_STRIPE_SECRET="sk_live_hidden")
    assert done.returncode == 2
    assert ("genservice: warning: GENSERVICE_STRIPE_SECRET is not a setting (did you mean "
            "GENSERVICE_STRIPE_SECRET_KEY?); ignored") in done.stderr
    assert "sk_live_hidden" not in done.stderr


def commands(parser, prefix=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from commands(sub, (*prefix, name))


@pytest.mark.parametrize("argv", [(), *commands(build_parser())])
def test_every_command_has_a_working_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: genservice")


@pytest.mark.parametrize("env,line", [
    ({"GENSERVICE_TRUSTED_PROXIES": "10.0.0.0/8,notanip"},
     "genservice: GENSERVICE_TRUSTED_PROXIES: 'notanip' does not appear to be an IPv4 or IPv6 network"),
    ({"GENSERVICE_TLS_CERT": "/nonexistent/cert.pem"},
     "genservice: GENSERVICE_TLS_CERT and GENSERVICE_TLS_KEY go together: set both, or neither"),
    ({"GENSERVICE_TLS_CERT": "/nonexistent/cert.pem", "GENSERVICE_TLS_KEY": "/nonexistent/key.pem"},
     "genservice: GENSERVICE_TLS_CERT: no readable file at /nonexistent/cert.pem"),
    ({"GENSERVICE_LOG_LEVEL": "LOUD"},
     "genservice: GENSERVICE_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not 'LOUD'"),
])
def test_serve_refuses_settings_it_cannot_start_with_in_one_line(tmp_path, env, line):
    done = run(tmp_path, "serve", **env)
    assert (done.returncode, done.stderr.splitlines()) == (2, [line])


def test_serve_refuses_a_damaged_node_key_without_showing_it(tmp_path):
    key = tmp_path / "node-key"
    key.write_text("not-base64-SECRETISH!\n")
    done = run(tmp_path, "serve", GENSERVICE_NODE_KEY_FILE=str(key))
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"genservice: GENSERVICE_NODE_KEY_FILE: {key} is not a node key (32 bytes in base64)"])
