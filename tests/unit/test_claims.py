"""The rule every reader of the claims log applies (kmigrate.claims.Claims): which appended claim
takes effect, in log order."""
from __future__ import annotations

import os

from kmigrate import claims
from kmigrate.claims import Claims


def run_claim(run: str, *topics: str, dag: str = "kafka_migration") -> dict:
    return {"kind": "run", "run": run, "topics": list(topics), "dag": dag, "host": "h"}


def lease(holder: str, scope: str = "t:0", lease_ms: int = 30_000, **extra) -> dict:
    return {"kind": "lease", "scope": scope, "holder": holder, "run": "r", "lease_ms": lease_ms, **extra}


def test_the_first_run_to_claim_a_topic_holds_it_and_a_second_is_void_until_release():
    state = Claims()
    assert state.apply(1, run_claim("a", "orders", "payments"))
    assert not state.apply(2, run_claim("b", "payments", "audit"))
    assert state.conflicts("b", ["payments", "audit"]) == {"a": ["payments"]}
    assert "b" not in state.runs
    assert state.apply(3, run_claim("b", "audit"))  # disjoint topics: both hold theirs
    assert state.apply(4, {"kind": "run-release", "run": "a"})
    assert not state.apply(5, {"kind": "run-release", "run": "a"})  # released already
    assert state.apply(6, run_claim("b", "payments"))
    assert state.runs["b"]["topics"] == ["audit", "payments"]


def test_a_run_claiming_again_keeps_its_topics_and_adds_free_ones():
    state = Claims()
    assert state.apply(1, run_claim("a", "orders"))
    assert state.apply(2, run_claim("a", "orders"))
    assert state.apply(3, run_claim("a", "audit"))
    assert state.runs["a"]["topics"] == ["audit", "orders"]


def test_a_lease_is_void_while_another_holder_renews_it_and_takes_effect_when_it_runs_out():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    assert not state.apply(2_000, lease("y"))
    assert state.apply(20_000, lease("x"))            # renewal
    assert not state.apply(50_000, lease("y"))        # 30 s after the renewal: still held
    assert state.apply(50_001, lease("y"))            # run out
    assert not state.apply(50_002, lease("x"))        # the old holder's renewal comes too late
    assert state.parts["t:0"]["holder"] == "y"
    assert state.apply(50_003, lease("z", scope="t:1"))  # another partition: independent


def test_a_lease_is_taken_over_at_once_only_by_naming_its_current_holder_as_gone():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    assert not state.apply(2_000, lease("y", breaks="w"))  # names another holder: void
    assert state.apply(2_001, lease("y", breaks="x"))
    assert state.parts["t:0"]["holder"] == "y"


def test_only_the_holder_releases_a_lease():
    state = Claims()
    assert state.apply(1, lease("x"))
    assert not state.apply(2, {"kind": "lease-release", "scope": "t:0", "holder": "y"})
    assert state.apply(3, {"kind": "lease-release", "scope": "t:0", "holder": "x"})
    assert state.apply(4, lease("y"))


def test_records_of_unknown_kinds_or_shapes_change_nothing():
    state = Claims()
    assert not state.apply(1, {"kind": "from-a-later-version", "run": "a"})
    assert not state.apply(2, {})
    assert not state.apply(3, ["not", "a", "claim"])
    assert not state.apply(4, {"kind": "run", "run": "a"})                 # no topics
    assert not state.apply(5, {"kind": "run", "run": "a", "topics": "orders"})  # not a list
    assert not state.apply(6, {"kind": "lease", "scope": "t:0", "holder": "x"})  # no lease length
    assert not state.apply(7, {"kind": "run", "run": ["a"], "topics": ["orders"]})  # a run is named by a string
    assert not state.apply(8, {"kind": "lease", "scope": "t:0", "holder": None, "lease_ms": 1})  # holders compared
    assert state.runs == {} and state.parts == {}
    assert state.apply(9, run_claim("a", "orders"))  # and the fold goes on


def test_a_record_value_is_a_claim_only_when_it_is_a_json_object():
    assert claims._claim_of(b'{"kind": "run"}') == {"kind": "run"}
    for value in (None, b"", b"not json", b"\xff\xfe", b"[1, 2]", b"null", b'"text"', b"42"):
        assert claims._claim_of(value) is None, value
    assert claims._what(None) == "no value: a tombstone"
    assert claims._what(b"x" * 100).endswith("...")


def test_the_refusal_names_the_holding_run_its_dag_and_the_way_out():
    state = Claims()
    state.apply(1_700_000_000_000, run_claim("nightly-move", "orders", dag="kafka_dr_drill"))
    exc = claims._held_error("second", state.conflicts("second", ["orders", "audit"]), state)
    text = str(exc)
    assert "run 'nightly-move' of DAG 'kafka_dr_drill'" in text and "holds orders" in text
    assert "python -m kmigrate.claims release nightly-move" in text
    assert exc.holders == ["nightly-move"]


def test_a_holder_is_known_gone_only_on_its_own_host():
    me = {"host": claims.socket.gethostname(), "pid": os.getpid(), "started": claims._started(os.getpid())}
    assert claims._started(os.getpid()) is not None
    assert not claims._gone(me)
    assert claims._gone({**me, "started": "0"})          # the process id was reused by another process
    assert not claims._gone({**me, "host": "elsewhere", "started": "0"})  # cannot tell from here
