"""How Connect's HTTP answers become the project's errors (pure mapping; the calls themselves are
tested against real workers in tests/integration/test_stack_connect.py)."""
from __future__ import annotations

from kmigrate.errors import ConnectError, ConnectorNotFound, ConnectorStateError
from kmigrate.kafka.connect import _error_for


def test_404_names_the_connector():
    err = _error_for(404, "Connector c1 not found", "GET", "/connectors/c1/offsets", "http://w:8083", "c1")
    assert isinstance(err, ConnectorNotFound) and err.status == 404
    assert "'c1'" in str(err) and "http://w:8083" in str(err) and "check the connector name" in str(err)


def test_400_and_409_are_state_errors_with_the_way_out():
    err = _error_for(400, "Connectors must be in the STOPPED state", "PATCH", "/connectors/c/offsets", "u", "c")
    assert isinstance(err, ConnectorStateError) and "STOPPED" in str(err)
    exists = _error_for(409, "Connector c already exists", "POST", "/connectors", "u", "c")
    assert isinstance(exists, ConnectorStateError) and "delete it first" in str(exists)


def test_auth_and_server_errors():
    assert "credentials" in str(_error_for(401, "Unauthorized", "GET", "/connectors", "u", None))
    err = _error_for(500, "boom", "GET", "/connectors", "u", None)
    assert type(err) is ConnectError and "worker log" in str(err) and "500" in str(err)
