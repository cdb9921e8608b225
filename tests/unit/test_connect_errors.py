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


# What answers when the Connect connection points at something that is not Connect: a real HTTP
# server on a local port (tests/support/local_http.py), not a mock.

def test_a_200_html_page_names_the_url_the_call_and_what_came_back():
    from kmigrate.kafka.connect import ConnectClient

    from tests.support.local_http import serving

    page = "<!DOCTYPE html><html><head><title>Sign in - Corporate Proxy</title></head><body>...</body></html>"
    with serving(page, "text/html; charset=utf-8") as url:
        for call in (lambda c: c.connectors(), lambda c: c.worker_version, lambda c: c.status("c1")):
            try:
                call(ConnectClient(url))
            except ConnectError as exc:
                text = str(exc)
            else:
                raise AssertionError("accepted an HTML page")
            assert url in text and "text/html" in text and "Sign in - Corporate Proxy" in text
            assert "not the Kafka Connect REST API" in text and "login page" in text


def test_json_of_another_shape_names_the_call():
    import pytest
    from kmigrate.kafka.connect import ConnectClient

    from tests.support.local_http import serving

    with serving('{"status": "ok", "items": 3}', "application/json") as url:
        client = ConnectClient(url)
        with pytest.raises(ConnectError, match=r"GET /connectors with JSON of another shape.*'an object with keys status, "
                                               r"items'"):
            client.connectors()
        with pytest.raises(ConnectError, match=r"GET /connectors/c1/status with JSON of another shape"):
            client.state("c1")
        with pytest.raises(ConnectError, match=r"GET /connectors/c1/offsets with JSON of another shape"):
            client.offsets("c1")
    with serving('[1, 2]', "application/json") as url:
        with pytest.raises(ConnectError, match=r"GET / with JSON of another shape.*not the Kafka Connect REST API"):
            ConnectClient(url).version()


def test_a_rebalance_about_to_happen_is_waited_out_and_other_server_errors_are_not():
    """Connect answers 500 "a rebalance is expected" while another connector's change propagates."""
    import pytest
    from kmigrate.kafka.connect import ConnectClient

    from tests.support.local_http import serving

    expected = (500, '{"error_code": 500, "message": "Request cannot be completed because a rebalance is expected"}')
    with serving("[]", "application/json", first=[expected, expected]) as url:
        assert ConnectClient(url).connectors() == []  # the third answer
    with serving("[]", "application/json", first=[(500, '{"error_code": 500, "message": "boom"}')]) as url:
        with pytest.raises(ConnectError, match="boom"):
            ConnectClient(url).connectors()
