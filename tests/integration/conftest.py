"""Fixtures of the tests on the real local stack."""
from __future__ import annotations

import pytest

from tests.kafka_helpers import all_watermarks


@pytest.fixture
def source_untouched(stack):
    """Records the watermarks of the source topics a test names; asserts they did not move."""
    watched: dict[str, list] = {}

    def watch(topic):
        watched[topic] = all_watermarks(stack.source, topic)

    yield watch
    for topic, before in watched.items():
        assert all_watermarks(stack.source, topic) == before, f"source topic {topic} changed"
