"""Pure logic for Connect workers before Kafka 3.5: which release a version string stands for, the
offsets topic, reading source connector offsets from its records, the sink connector's group."""
from __future__ import annotations

import json

import pytest
from kmigrate.errors import ConfigError
from kmigrate.kafka.connect import ConnectClient, apache_release
from kmigrate.run.connectors import old_connect


@pytest.mark.parametrize("version, release", [
    ("2.8.2", (2, 8)), ("3.9.1", (3, 9)), ("4.3.1", (4, 3)), ("3.5.0-SNAPSHOT", (3, 5)),
    ("6.2.1-ccs", (2, 8)), ("7.4.0-ccs", (3, 4)), ("7.5.3-ccs", (3, 5)), ("8.0.0-ccs", (4, 0)),
    ("unknown", None), ("99.1", None)])
def test_apache_release(version, release):
    assert apache_release(version) == release


@pytest.mark.parametrize("version, offsets_api, creates_stopped", [
    ("2.8.2", False, False), ("3.4.1", False, False), ("3.5.0", True, False), ("3.9.1", True, True),
    ("4.3.1", True, True), ("7.4.0-ccs", False, False), ("weird", True, True)])
def test_what_a_worker_can_do_follows_its_version(version, offsets_api, creates_stopped):
    client = ConnectClient("http://nowhere:1")
    client._version = version  # as GET / answered
    assert (client.has_offsets_api, client.creates_stopped) == (offsets_api, creates_stopped)


def _key(name, partition):
    return json.dumps([name, partition]).encode()


def test_the_latest_record_of_a_key_wins_and_null_deletes_it():
    records = [
        (_key("src", {"filename": "/a"}), b'{"position": 10}'),
        (_key("src", {"filename": "/b"}), b'{"position": 5}'),
        (_key("other", {"filename": "/a"}), b'{"position": 99}'),
        (_key("src", {"filename": "/a"}), b'{"position": 42}'),
        (_key("src", {"filename": "/b"}), None),
        (b"not json", b'{"position": 1}'),
        (_key("src", {"filename": "/c"}), b'{"position": 7}'),
        (None, b"{}"),
    ]
    assert old_connect.fold_offsets(records, ["src", "absent"]) == {
        "src": [{"partition": {"filename": "/a"}, "offset": {"position": 42}},
                {"partition": {"filename": "/c"}, "offset": {"position": 7}}],
        "absent": []}


def test_a_sink_connector_commits_in_its_own_group_unless_its_config_names_one():
    assert old_connect.sink_group("fs-sink", {"topics": "t"}) == "connect-fs-sink"
    assert old_connect.sink_group("fs-sink", {"consumer.override.group.id": "mine"}) == "mine"


class _Topics:
    """A stand-in for ClusterAdmin's topic list (pure logic: which name is picked)."""

    def __init__(self, *topics):
        self.topics = list(topics)
        self.cluster = type("C", (), {"bootstrap_servers": "localhost:1"})()

    def list_topics(self):
        return self.topics


def _old_worker(offsets_topic=None):
    client = ConnectClient("http://old:8083", offsets_topic=offsets_topic)
    client._version = "2.8.2"
    return client


def test_the_offsets_topic_is_the_named_one_the_default_or_the_only_one_ending_so():
    assert old_connect.offsets_topic(_Topics("connect-offsets", "x-connect-offsets"), _old_worker()) == "connect-offsets"
    assert old_connect.offsets_topic(_Topics("_connect-offsets", "orders"), _old_worker()) == "_connect-offsets"
    assert old_connect.offsets_topic(_Topics("mine", "connect-offsets"), _old_worker("mine")) == "mine"


@pytest.mark.parametrize("topics, named, says", [
    (("a-connect-offsets", "b-connect-offsets"), None, "2 topics end in it (a-connect-offsets, b-connect-offsets)"),
    (("orders",), None, "no topics end in it"),
    (("connect-offsets",), "mine", "it does not exist on the source cluster"),
])
def test_an_offsets_topic_that_cannot_be_found_is_refused_naming_the_way_out(topics, named, says):
    with pytest.raises(ConfigError) as raised:
        old_connect.offsets_topic(_Topics(*topics), _old_worker(named))
    message = str(raised.value)
    assert says in message and '"offsets_topic"' in message and "2.8.2 at http://old:8083" in message
