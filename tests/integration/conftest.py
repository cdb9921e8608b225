"""Fixtures of the tests on the real local stack."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConnectorNotFound
from kmigrate.kafka.connect import ConnectClient

from tests.support.kafka import all_watermarks


@pytest.fixture
def source_untouched(stack):
    """Records the watermarks of the source topics a test names; asserts they did not move."""
    watched: dict[str, list] = {}

    def watch(topic):
        watched[topic] = all_watermarks(stack.source, topic)

    yield watch
    for topic, before in watched.items():
        assert all_watermarks(stack.source, topic) == before, f"source topic {topic} changed"


@pytest.fixture
def connectors(stack):
    """Records connectors a test creates, and deletes them afterwards."""
    created: list[tuple[ConnectClient, str]] = []
    yield created
    for client, name in created:
        try:
            client.delete(name)
        except ConnectorNotFound:
            pass
