"""The claims CLI (`python -m kmigrate.claims`, kmigrate.claims.cli) without a cluster: client
settings from a file readable by its owner only or from the environment, never a secret on the
command line; every error one clear line and a non-zero exit."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kmigrate.claims import cli
from kmigrate.claims.state import Claims
from kmigrate.errors import ClusterUnavailable, ConfigError

TARGET = ["--bootstrap-servers", "localhost:1"]


class FakeLog:
    """What the CLI asks of a claims log, with the settings it was opened with kept."""

    def __init__(self, state: Claims | None = None, fail: Exception | None = None) -> None:
        self.state, self.fail, self.targets = state or Claims(), fail, []

    def __call__(self, target):
        self.targets.append(target)
        return self

    def current(self) -> Claims:
        if self.fail:
            raise self.fail
        return self.state


@pytest.fixture
def fake_log(monkeypatch) -> FakeLog:
    fake = FakeLog()
    monkeypatch.setattr(cli, "claim_log", fake)
    return fake


def settings_file(tmp_path, text: str, mode: int) -> str:
    path = tmp_path / "target.properties"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("item", ["sasl.password=hunter2", "ssl.key.password=x", "ssl.keystore.password=x",
                                  "sasl.jaas.config=x", "ssl.key.pem=x", "sasl.oauthbearer.client.secret=x",
                                  "SASL.PASSWORD=x"])
def test_a_secret_on_the_command_line_is_refused(item, capsys, fake_log):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["show", *TARGET, "--config", item], environ={})
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    key = item.split("=")[0]
    assert f"{key} is a secret" in err and "--config-file" in err and "chmod 600" in err
    assert "KMIGRATE_CLAIMS_CONFIG_" in err and "hunter2" not in err and not fake_log.targets


def test_settings_that_are_no_secret_pass_on_the_command_line(fake_log, capsys):
    assert cli.main(["show", *TARGET, "--config", "security.protocol=SASL_SSL", "--config",
                     "ssl.key.location=/etc/kafka/client.key", "--config", "sasl.mechanism=SCRAM-SHA-512"],
                    environ={}) == 0
    assert fake_log.targets[0].settings == {"bootstrap.servers": "localhost:1", "security.protocol": "SASL_SSL",
                                            "ssl.key.location": "/etc/kafka/client.key",
                                            "sasl.mechanism": "SCRAM-SHA-512"}
    assert json.loads(capsys.readouterr().out) == {"leases": {}, "runs": [], "sources": {}}


def test_a_config_item_without_equals_is_a_clear_usage_error(capsys, fake_log):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["show", *TARGET, "--config", "foo"], environ={})
    assert exit_.value.code == 2
    assert "argument --config: 'foo' is not KEY=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o622])
def test_a_settings_file_others_may_read_or_write_is_refused(tmp_path, capsys, fake_log, mode):
    path = settings_file(tmp_path, "sasl.password=hunter2\n", mode)
    assert cli.main(["show", *TARGET, "--config-file", path], environ={}) == 1
    err = capsys.readouterr().err
    assert path in err and f"chmod 600 {path}" in err and f"{mode:04o}" in err and "Traceback" not in err
    assert not fake_log.targets


def test_a_settings_file_of_its_owner_only_is_read_lines_or_json(tmp_path, fake_log):
    lines = settings_file(tmp_path, "# the target\nsecurity.protocol=SASL_SSL\n\nsasl.password = a=b \n", 0o600)
    assert cli.main(["show", *TARGET, "--config-file", lines], environ={}) == 0
    assert fake_log.targets[-1].settings == {"bootstrap.servers": "localhost:1", "security.protocol": "SASL_SSL",
                                             "sasl.password": "a=b"}
    as_json = tmp_path / "target.json"
    as_json.write_text(json.dumps({"sasl.username": "u", "sasl.password": "p", "enable.ssl.certificate.verification":
                                   False, "bootstrap.servers": "elsewhere:9092"}))
    as_json.chmod(0o400)
    assert cli.main(["show", *TARGET, "--config-file", str(as_json)], environ={}) == 0
    assert fake_log.targets[-1].settings == {"bootstrap.servers": "localhost:1", "sasl.username": "u",
                                             "sasl.password": "p", "enable.ssl.certificate.verification": "false"}


@pytest.mark.parametrize("text, why", [("security.protocol\n", "line 1: not KEY=VALUE"),
                                       ('{"sasl.password": ', "is not a JSON object"),
                                       ('{"sasl.password": {"a": 1}}', "a client setting's value is text")])
def test_a_settings_file_of_another_shape_is_named(tmp_path, capsys, fake_log, text, why):
    path = settings_file(tmp_path, text, 0o600)
    assert cli.main(["show", *TARGET, "--config-file", path], environ={}) == 1
    err = capsys.readouterr().err
    assert path in err and why in err and "Traceback" not in err


def test_a_missing_settings_file_is_named(tmp_path, capsys, fake_log):
    assert cli.main(["show", *TARGET, "--config-file", str(tmp_path / "absent")], environ={}) == 1
    assert f"--config-file {tmp_path / 'absent'} cannot be read" in capsys.readouterr().err


def test_settings_from_the_environment(fake_log):
    environ = {"KMIGRATE_CLAIMS_CONFIG": json.dumps({"sasl.username": "u", "sasl.password": "from-json"}),
               "KMIGRATE_CLAIMS_CONFIG_SASL_PASSWORD": "from-var", "KMIGRATE_CLAIMS_CONFIG_SECURITY_PROTOCOL":
               "SASL_SSL", "KMIGRATE_CLAIMS_CONFIGURED": "not ours", "PATH": "/bin"}
    assert cli.main(["show", *TARGET, "--config", "sasl.mechanism=PLAIN"], environ=environ) == 0
    assert fake_log.targets[0].settings == {"bootstrap.servers": "localhost:1", "sasl.username": "u",
                                            "sasl.password": "from-var", "security.protocol": "SASL_SSL",
                                            "sasl.mechanism": "PLAIN"}


def test_release_arguments(capsys, fake_log):
    for argv, said in [(["release", *TARGET], "release needs the run's name"),
                       (["release", "r", *TARGET, "--deployment", "d@/s"], "--deployment names another deployment"),
                       (["show", "r", *TARGET], "show takes no run")]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv, environ={})
        assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_release_of_a_run_held_by_a_deployment_needs_force(monkeypatch, capsys, fake_log):
    fake_log.state.apply(1, {"kind": "run", "run": "r", "deployment": "kafka_migration@/s", "topics": ["o"]})
    released = []
    monkeypatch.setattr(cli, "release_topics", lambda target, run, **how: released.append((run, how)) or
                        bool(how.get("force")))
    assert cli.main(["release", "r", *TARGET], environ={}) == 1
    err = capsys.readouterr().err
    assert "its claims are of deployment 'kafka_migration@/s'" in err and "--force" in err
    assert released == [("r", {})]
    assert cli.main(["release", "r", *TARGET, "--force"], environ={}) == 0
    assert cli.main(["release", "r", *TARGET, "--force", "--deployment", "kafka_migration@/s"], environ={}) == 0
    assert released[1:] == [("r", {"deployment": None, "force": True}),
                            ("r", {"deployment": "kafka_migration@/s", "force": True})]
    assert "its topics are released" in capsys.readouterr().out


def test_an_error_reaching_the_cluster_is_one_line_and_exit_1(capsys, monkeypatch):
    monkeypatch.setattr(cli, "claim_log", FakeLog(fail=ClusterUnavailable("target: no broker answered")))
    assert cli.main(["show", *TARGET], environ={}) == 1
    err = capsys.readouterr().err
    assert err == "python -m kmigrate.claims show: target: no broker answered\n"


def test_python_dash_m_runs_the_cli_and_refuses_a_secret_without_a_traceback():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "kmigrate.claims", "show", *TARGET, "--config", "sasl.password=x"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "sasl.password is a secret" in done.stderr and "Traceback" not in done.stderr


def test_is_secret():
    assert all(cli.is_secret(key) for key in ("sasl.password", "ssl.key.password", "ssl.keystore.password",
                                              "sasl.jaas.config", "ssl.key.pem", "sasl.oauthbearer.config",
                                              "sasl.oauthbearer.client.secret", "ssl_key"))
    assert not any(cli.is_secret(key) for key in ("security.protocol", "sasl.mechanism", "sasl.username",
                                                  "ssl.ca.location", "ssl.key.location", "ssl.keystore.location",
                                                  "ssl.certificate.location", "client.id"))


def test_config_errors_are_kmigrate_errors():
    with pytest.raises(ConfigError, match="chmod 600"):
        cli.read_config_file(os.devnull)  # a character device others may read and write
