"""How a connector's name enters a Connect REST path: one percent-encoded segment, checked first
(pure: the session's request is recorded, no worker)."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.kafka.connect import ConnectClient, check_connector_name, connector_path


class _Answer:
    status_code, content, headers, text = 200, b"", {}, ""


def _paths(call) -> list[str]:
    client = ConnectClient("http://connect:8083")
    seen: list[str] = []
    client._session.request = lambda method, url, **kw: seen.append(url) or _Answer()
    call(client)
    return seen


@pytest.mark.parametrize("name, path", [
    ("b#c", "/connectors/b%23c"), ("a?b=1", "/connectors/a%3Fb%3D1"), ("a b", "/connectors/a%20b"),
    ("déjà", "/connectors/d%C3%A9j%C3%A0"), ("a..b", "/connectors/a..b"),
])
def test_each_name_is_one_encoded_segment(name, path):
    assert connector_path(name, "status") == path + "/status"
    for call, tail in [(lambda c: c.delete(name), ""), (lambda c: c.stop(name, wait=False), "/stop"),
                       (lambda c: c.pause(name), "/pause"), (lambda c: c.resume(name), "/resume")]:
        assert _paths(call) == ["http://connect:8083" + path + tail]


@pytest.mark.parametrize("name", ["a/../b", "a%2Fb", "%", " a", "a ", "", "a\x00", "a\nb", ".", "..", None, 5])
def test_names_connect_cannot_serve_are_refused_without_a_request(name):
    with pytest.raises(ConfigError, match="connector name"):
        check_connector_name(name)
    assert _paths(lambda c: pytest.raises(ConfigError, c.delete, name)) == []
