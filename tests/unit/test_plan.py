from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate_spark.clients import load_clients, write_clients
from kmigrate.run.copying.plan import work_units


def test_client_file_round_trip_with_owner_only_permissions(tmp_path):
    source = ClusterConfig.from_bootstrap("source", "s:9092", **{"sasl.password": "x"})
    target = ClusterConfig.from_bootstrap("target", "t:9092")
    path = write_clients(tmp_path / "clients.json", source, target)
    assert path.stat().st_mode & 0o777 == 0o600
    loaded_source, loaded_target = load_clients(path)
    assert loaded_source.settings == source.settings and loaded_target.bootstrap_servers == "t:9092"


def test_client_file_errors_name_the_file_and_the_fix(tmp_path):
    path = tmp_path / "clients.json"
    with pytest.raises(ConfigError, match="cannot be read.*check the path"):
        load_clients(path)
    path.write_text("{}")
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="readable by others.*chmod 600"):
        load_clients(path)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="'source' and 'target'"):
        load_clients(path)


def test_work_units_from_a_plan():
    plan = {"units": [{"topic": "a", "partition": 1, "end_offset": 10, "mode": "translate", "offsets": 10}]}
    [unit] = work_units(plan)
    assert (unit.topic, unit.partition, unit.end_offset, unit.mode) == ("a", 1, 10, "translate")
