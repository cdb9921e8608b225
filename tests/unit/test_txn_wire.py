"""The transaction requests' answers read without a broker: which open transaction is hanging."""
from __future__ import annotations

import struct

from kmigrate.config import ClusterConfig
from kmigrate.kafka import txn_wire
from kmigrate.kafka.txn_wire import OpenTransaction
from kmigrate.kafka.txn_wire import _compact_string as compact
from kmigrate.kafka.varint import uvarint


def entry(transactional_id: str, producer_id: int, state: str) -> bytes:
    return compact(transactional_id) + struct.pack(">q", producer_id) + compact(state) + b"\x00"


def test_a_list_transactions_answer_gives_the_wanted_producers_ids_and_states():
    listed = entry("app-1", 7, "CompleteCommit") + entry("app-2", 9, "Ongoing")
    # response header tags, throttle, error code, one unknown state filter, two transactions, tags
    answer = b"\x00" + struct.pack(">ih", 0, 0) + uvarint(2) + compact("Bogus") + uvarint(3) + listed + b"\x00"
    assert txn_wire._listed(memoryview(answer), [7, 8]) == {7: ("app-1", "CompleteCommit")}
    errored = b"\x00" + struct.pack(">ih", 0, 41) + uvarint(1) + uvarint(3) + listed + b"\x00"
    assert txn_wire._listed(memoryview(errored), [7]) == {}  # an answer with an error is not believed


def test_only_a_transaction_its_coordinator_holds_ended_is_hanging(monkeypatch):
    monkeypatch.setattr(txn_wire, "coordinator_states",
                        lambda cluster, ids: {1: ("a", "CompleteCommit"), 2: ("b", "Ongoing"), 4: ("d", "Empty")})
    producers = {("t", 0): [OpenTransaction(1, 0, 5, 0)], ("t", 1): [OpenTransaction(2, 0, 9, 0)],
                 ("t", 2): [OpenTransaction(3, 0, 4, 0)],  # no coordinator lists it: unknown, so waited for
                 ("t", 3): [OpenTransaction(4, 1, 2, 0), OpenTransaction(1, 0, 8, 0)]}
    stable_at = {("t", 0): 5, ("t", 1): 9, ("t", 2): 4, ("t", 3): 2}
    out = txn_wire._hanging(ClusterConfig.from_bootstrap("c", "localhost:1"), stable_at, producers)
    assert sorted(out) == [("t", 0), ("t", 3)]
    assert "'a' as CompleteCommit" in out[("t", 0)] and "--partition 0 --start-offset 5`" in out[("t", 0)]
    assert "by producer id 4 (epoch 1)" in out[("t", 3)]  # the transaction that holds the stable offset
