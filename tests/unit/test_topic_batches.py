"""CreateTopics in batches the KRaft controller takes (at most 10,000 records a request), without a
broker: the batching, the halving of a batch refused for its size, a topic too large for any request
refused by name before anything is created, the validate-only rights check batched the same way, and
CreatePartitions growing a topic by at most 10,000 partitions a request."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from kmigrate.errors import KmigrateError
from kmigrate.kafka.admin import MAX_RECORDS_PER_REQUEST, ClusterAdmin
from kmigrate.kafka.topic_batches import create_topics, in_batches, too_large, topic_records
from kmigrate.run.checks.rights import create_rights
from kmigrate.run.targets.topic_io import create_all

TOO_LARGE = "Unable to perform excessively large batch operation."


def test_batches_keep_whole_items_in_order_under_the_limit_and_a_larger_item_alone():
    assert in_batches([4, 4, 4], lambda n: n, 10) == [[4, 4], [4]]
    assert in_batches([10, 1, 9, 1], lambda n: n, 10) == [[10], [1, 9], [1]]
    assert in_batches([3, 12, 3, 3], lambda n: n, 10) == [[3], [12], [3, 3]]
    assert in_batches([], lambda n: n, 10) == []
    assert in_batches(range(5), lambda n: 1) == [[0, 1, 2, 3, 4]]  # a small run: one request, as before


def test_a_topic_counts_its_own_record_its_configs_and_its_partitions():
    assert MAX_RECORDS_PER_REQUEST == 10_000  # Kafka 4.3.1: QuorumController.MAX_RECORDS_PER_USER_OP
    assert topic_records(NewTopic("t", 4000, 1)) == 4001
    assert topic_records(NewTopic("t", 50, 1, config={"retention.ms": "1", "cleanup.policy": "delete"})) == 53
    assert topic_records(NewTopic("t", -1, -1)) == 2  # the broker's default count: one


def error(code: int, text: str) -> KafkaException:
    return KafkaException(KafkaError(code, text))


class FakeController:
    """An AdminClient whose controller refuses a CreateTopics over `limit` records as Kafka does
    (POLICY_VIOLATION on every topic of it), and creates the others; remembers each request's topics."""

    def __init__(self, limit: int = MAX_RECORDS_PER_REQUEST, existing: frozenset[str] = frozenset()) -> None:
        self.limit, self.existing, self.requests = limit, set(existing), []

    def create_topics(self, topics, validate_only=False, operation_timeout=None, request_timeout=None):
        self.requests.append([t.topic for t in topics])
        too_many = sum(topic_records(t) for t in topics) > self.limit
        out = {}
        for t in topics:
            out[t.topic] = future = Future()
            if too_many:
                future.set_exception(error(KafkaError.POLICY_VIOLATION, TOO_LARGE))
            elif t.topic in self.existing:
                future.set_exception(error(KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{t.topic}' already exists."))
            else:
                future.set_result(None)
                if not validate_only:
                    self.existing.add(t.topic)
        return out


def admin_on(controller: FakeController) -> ClusterAdmin:
    admin = ClusterAdmin.__new__(ClusterAdmin)
    admin.cluster, admin.timeout_s, admin._admin = SimpleNamespace(name="target"), 5.0, controller
    return admin


def topics(count: int, partitions: int, prefix: str = "t") -> list[NewTopic]:
    return [NewTopic(f"{prefix}{i:03d}", partitions, 1, config={"retention.ms": "1000"}) for i in range(count)]


def test_the_issues_200_topics_of_50_partitions_are_created_in_requests_the_controller_takes():
    controller = FakeController()
    wanted = topics(200, 50)  # 10,000 partitions, 10,400 records: one request was refused
    made, existed, failure = create_all(admin_on(controller), wanted)
    assert failure is None and existed == set() and made == {t.topic for t in wanted}
    assert [len(r) for r in controller.requests] == [192, 8]  # 192 * 52 = 9,984 records
    assert sorted(sum(controller.requests, [])) == sorted(t.topic for t in wanted)


def test_a_batch_refused_for_its_size_is_halved_and_each_half_sent_again_never_whole():
    controller = FakeController(limit=5_000)  # a controller stricter than the constant says
    wanted = topics(4, 2_000)  # 8,008 records: planned as one request
    made, _, failure = create_all(admin_on(controller), wanted)
    assert failure is None and made == {t.topic for t in wanted}
    assert controller.requests == [["t000", "t001", "t002", "t003"], ["t000", "t001"], ["t002", "t003"]]

    controller = FakeController(limit=3_000)  # halved twice down to single topics
    outcome = create_topics(admin_on(controller), topics(4, 2_000, "u"))
    assert outcome == dict.fromkeys(["u000", "u001", "u002", "u003"])
    assert controller.requests == [["u000", "u001", "u002", "u003"], ["u000", "u001"], ["u002", "u003"],
                                   ["u000"], ["u001"], ["u002"], ["u003"]]


def test_a_single_topic_the_controller_refuses_keeps_its_error_and_is_not_sent_again():
    controller = FakeController(limit=1_000)
    outcome = create_topics(admin_on(controller), [NewTopic("big", 2_000, 1), NewTopic("small", 10, 1)],
                                                 limit=5_000)
    assert outcome["small"] is None and too_large(outcome["big"].args[0])
    assert controller.requests == [["big", "small"], ["big"], ["small"]]


def test_other_errors_are_not_split_and_an_existing_topic_still_counts_as_existing():
    controller = FakeController(existing=frozenset({"t001"}))
    made, existed, failure = create_all(admin_on(controller), topics(3, 10))
    assert (made, existed, failure) == ({"t000", "t002"}, {"t001"}, None)
    assert controller.requests == [["t000", "t001", "t002"]]
    assert not too_large(KafkaError(KafkaError.POLICY_VIOLATION, "Topic replication factor must be 3"))
    assert too_large(KafkaError(KafkaError.POLICY_VIOLATION, "Excessively large number of partitions per request."))


def test_a_topic_too_large_for_any_request_is_named_and_nothing_is_created():
    controller = FakeController()
    with pytest.raises(KmigrateError, match=r"topic 'huge' needs 12000 partitions.*Nothing was created.*--alter "
                                            r"--topic huge --partitions N"):
        create_all(admin_on(controller), [NewTopic("small", 3, 1, config={}), NewTopic("huge", 12_000, 1, config={})])
    assert controller.requests == []


def test_the_validate_only_rights_check_of_many_topics_is_batched():
    controller = FakeController()
    assert create_rights(admin_on(controller), [f"r{i:05d}" for i in range(12_000)]) == []
    assert [len(r) for r in controller.requests] == [5_000, 5_000, 2_000]  # two records a topic
    assert controller.existing == set()  # validated, not created


def test_a_topic_grows_by_at_most_the_limit_a_request():
    class Grower:
        def __init__(self) -> None:
            self.totals = []

        def create_partitions(self, new_partitions, operation_timeout=None, request_timeout=None):
            self.totals += [p.new_total_count for p in new_partitions]
            done = Future()
            done.set_result(None)
            return {p.topic: done for p in new_partitions}

    admin = admin_on(grower := Grower())
    admin.partition_count = lambda topic: 100
    admin.wait_for_topics = lambda partitions: None
    admin.add_partitions("t", 25_100)
    assert grower.totals == [10_100, 20_100, 25_100]
    grower.totals.clear()
    admin.add_partitions("t", 300)  # a small growth: one request, as before
    assert grower.totals == [300]


def test_config_changes_of_many_topics_go_in_requests_of_at_most_the_limit_entries_and_name_a_refused_topic():
    class Configs:
        """IncrementalAlterConfigs as the controller takes it: a record an entry, a request over the limit refused."""

        def __init__(self, refuse: str = "") -> None:
            self.requests, self.refuse = [], refuse

        def incremental_alter_configs(self, resources, request_timeout=None):
            self.requests.append(sum(len(r.incremental_configs) for r in resources))
            out = {}
            for r in resources:
                out[r] = done = Future()
                if self.requests[-1] > MAX_RECORDS_PER_REQUEST or r.name == self.refuse:
                    done.set_exception(error(KafkaError.POLICY_VIOLATION, TOO_LARGE))
                else:
                    done.set_result(None)
            return out

    admin = admin_on(Configs())
    changes = {f"t{i:05d}": ({"message.timestamp.type": "CreateTime", "retention.ms": "1"}, ["segment.ms"])
               for i in range(7_000)}  # 21,000 entries: three requests
    admin.alter_topics_configs(changes | {"same": ({}, [])})  # a topic with nothing to change is not sent
    assert admin._admin.requests == [9_999, 9_999, 1_002]
    admin = admin_on(Configs(refuse="t00002"))
    with pytest.raises(KmigrateError, match=r"changing configs message.timestamp.type, retention.ms, segment.ms of "
                                            r"topic 't00002' failed.*AlterConfigs permission"):
        admin.alter_topics_configs(dict(list(changes.items())[:5]))
