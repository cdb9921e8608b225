"""Connector names that a REST path would misread (outside audit): each name enters its path as one
percent-encoded segment, so `x#y` names that connector and not `x` (a drill's clean-up of it once
deleted `x`), and a name Kafka Connect cannot serve by its path (`a/../b`, which stopped `b`) is
refused before any request. Each against the stack's source Connect cluster."""
from __future__ import annotations

import uuid

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate_demo.workload import FILE_SOURCE

from tests.support.badinput import refused


@pytest.fixture
def running(stack, tmp_path):
    """A running file source connector on the source Connect cluster; deleted after."""
    name, topic = f"badname-{uuid.uuid4().hex[:8]}", f"badname-{uuid.uuid4().hex[:8]}"
    with ClusterAdmin(stack.source) as admin:
        admin.create_topic(topic, 1, {})
    data = tmp_path / "lines.txt"
    data.write_text("line\n")
    stack.source_connect.create(name, {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(data),
                                       "topic": topic})
    stack.source_connect.wait_for(name, lambda st: st["connector"]["state"] == "RUNNING", "RUNNING", 60)
    yield name
    stack.source_connect.delete(name)


def still_running(stack, name):
    def left() -> list[str]:
        state = stack.source_connect.state(name) if name in stack.source_connect.connectors() else "gone"
        return [] if state == "RUNNING" else [f"{name} {state}"]
    return left


def test_a_name_with_a_hash_names_that_connector_not_its_prefix(stack, running):
    other = f"{running}#dry"  # no such connector: before, the path ended at # and deleted `running`
    refused("connector name with # (delete)", lambda: stack.source_connect.delete(other), f"connector '{other}'",
            "not found", written=still_running(stack, running))
    refused("connector name with ? (stop)", lambda: stack.source_connect.stop(f"{running}?x", wait_s=5),
            f"connector '{running}?x'", "not found", written=still_running(stack, running))


def test_names_connect_cannot_serve_are_refused_before_any_request(stack, running):
    for kind, name in [("connector name a/../b (stop)", f"x/../{running}"),
                       ("connector name with %2F (stop)", f"x%2F..%2F{running}"),
                       ("connector name with spaces around it (stop)", f" {running} "),
                       ("connector name with a control character (stop)", f"{running}\x00")]:
        refused(kind, lambda n=name: stack.source_connect.stop(n, wait_s=5), repr(name), "cannot be served",
                "rename the connector", written=still_running(stack, running))
    refused("connector name empty (create)", lambda: stack.source_connect.create("", {"connector.class": FILE_SOURCE}),
            "connector name ''", "give the connector's name", written=still_running(stack, running))
