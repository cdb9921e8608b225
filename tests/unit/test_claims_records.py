"""The claims log as a trusted log of untrusted records (kmigrate.claims.records, .state): a record of
any shape, folded anywhere in a history, leaves every claim and lease as the history without it
would; a run is its name and its deployment; a snapshot of 100,000 leases is written in records under
the topic's size and taken in all or nothing."""
from __future__ import annotations

import copy
import json
import math
import random
import time

import pytest
from kmigrate.claims import log as claims_log
from kmigrate.claims import runs as claims_runs
from kmigrate.claims.records import problem, run_key
from kmigrate.claims.state import Claims
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError

PLACEHOLDER = None  # a tombstone: what the reader skips at the bad record's offset in the history without it


def run_claim(run: str, *topics: str, deployment: str | None = None, **extra) -> dict:
    return {"kind": "run", "run": run, "topics": list(topics), "dag": "kafka_migration", "host": "h",
            **({"deployment": deployment} if deployment is not None else {}), **extra}


def lease(holder: str, scope: str = "t:0", lease_ms=30_000, **extra) -> dict:
    return {"kind": "lease", "scope": scope, "holder": holder, "run": "r", "host": "h", "pid": 7, "started": "1",
            "lease_ms": lease_ms, **extra}


def renewal(holders: dict[str, str], lease_ms=30_000, **extra) -> dict:
    return {"kind": "lease-renewal", "holders": holders, "run": "r", "host": "h", "pid": 1, "lease_ms": lease_ms,
            **extra}


def encode(record) -> bytes:
    return json.dumps(record).encode()  # allow_nan: Infinity and NaN as another writer may send them


def fold(values: list[tuple[int, bytes | None]], state: Claims | None = None) -> tuple[Claims, list[bool]]:
    """The values folded as ClaimLog._fold_through folds a log (offsets from 0): skipped when no claim."""
    state = state or Claims()
    outcomes = []
    for offset, (ts, value) in enumerate(values):
        record = claims_log._claim_of(value)
        outcomes.append(False if record is None else state.apply(ts, record, offset))
    return state, outcomes


def shape(state: Claims) -> tuple:
    return state.runs, state.parts, state.born, state.leased, state.sources


def valid_history() -> list[tuple[int, bytes]]:
    return [(1_000, encode(run_claim("a", "orders", deployment="d@/s", source_id="src-1"))),
            (2_000, encode(lease("x", "orders:0"))),
            (3_000, encode(run_claim("b", "audit")))]


def then(state: Claims, offset: int) -> list[bool]:
    """Claims and leases after the history: a conflict, a claim, a lease, a renewal, a takeover refused."""
    return [state.apply(10_000, run_claim("c", "orders"), offset),
            state.apply(10_001, run_claim("c", "payments"), offset + 1),
            state.apply(10_002, lease("y", "orders:1"), offset + 2),
            state.apply(10_003, lease("x", "orders:0"), offset + 3),
            state.apply(10_004, lease("z", "orders:0"), offset + 4)]


DEEP = b"[" * 100_000 + b"]" * 100_000
BAD_RECORDS = {
    "nested 100,000 deep": DEEP,
    "nested object 100,000 deep": b'{"kind": "run", "dag": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
    "lease_ms Infinity": encode(lease("w", "orders:2", float("inf"))),
    "lease_ms NaN": encode(lease("w", "orders:2", float("nan"))),
    "lease_ms 1e400": json.dumps(lease("w", "orders:2", 1)).replace('"lease_ms": 1', '"lease_ms": 1e400').encode(),
    "lease_ms text": encode(lease("w", "orders:2", "x")),
    "lease_ms true": encode(lease("w", "orders:2", True)),
    "lease_ms below 0": encode(lease("w", "orders:2", -5)),
    "lease holder not a string": encode({**lease("w", "orders:2"), "holder": ["w"]}),
    "lease scope not a string": encode({**lease("w"), "scope": 3}),
    "lease pid text": encode(lease("w", "orders:2", pid="self")),
    "lease breaks not a string": encode(lease("w", "orders:0", breaks=["x"])),
    "lease-renewal holders a list": encode(renewal({}) | {"holders": [["orders:0", "x"]]}),
    "lease-renewal holder a number": encode(renewal({"orders:0": 7})),
    "lease-renewal lease_ms Infinity": encode(renewal({"orders:0": "x"}, float("inf"))),
    "lease-release holder not a string": encode({"kind": "lease-release", "scope": "orders:0", "holder": None}),
    "run topics a string": encode(run_claim("w", "orders") | {"topics": "orders"}),
    "run topics not strings": encode(run_claim("w") | {"topics": ["ok", 3]}),
    "run name not a string": encode(run_claim("w", "x") | {"run": {"a": 1}}),
    "run name with NUL": encode(run_claim("a\x00d@/s", "x")),
    "run deployment not a string": encode(run_claim("w", "x", deployment=None) | {"deployment": 5}),
    "run source_id not a string": encode(run_claim("w", "x", source_id=5)),
    "run dag not a string": encode(run_claim("w", "x") | {"dag": ["d"]}),
    "run-release run a list": encode({"kind": "run-release", "run": ["a"]}),
    "run-release force text": encode({"kind": "run-release", "run": "b", "force": "yes"}),
    "run-release deployment not a string": encode({"kind": "run-release", "run": "a", "deployment": 1}),
}


def bad_snapshots(offset: int) -> dict[str, dict]:
    """Snapshots at their own offset (in effect if their shape were right), each wrong in one way, of
    another state than the history's (a snapshot applied in part would show)."""
    other, _ = fold([(1, encode(run_claim("z", "orders", deployment="x@/y", source_id="src-9"))),
                     (2, encode(lease("q", "orders:0")))])
    good = json.loads(json.dumps(other.snapshot(offset)))
    some_run = next(iter(good["runs"]))
    some_part = next(iter(good["parts"]))
    return {
        "snapshot runs a string": {**good, "runs": "everything"},
        "snapshot runs entry not an object": {**good, "runs": {some_run: "a"}},
        "snapshot runs entry topics a string": {**good, "runs": {some_run: {**good["runs"][some_run], "topics": "o"}}},
        "snapshot runs entry keyed by another run": {**good, "runs": {"z": good["runs"][some_run]}},
        "snapshot runs entry no ts": {**good, "runs": {some_run: {k: v for k, v in good["runs"][some_run].items()
                                                                  if k != "ts"}}},
        "snapshot missing leased": {k: v for k, v in good.items() if k != "leased"},
        "snapshot leased not scopes": {**good, "leased": [1]},
        "snapshot parts a list": {**good, "parts": [good["parts"][some_part]]},
        "snapshot parts entry not an object": {**good, "parts": {some_part: 1}},
        "snapshot parts entry holder a number": {**good, "parts": {some_part: {**good["parts"][some_part], "holder": 1}}},
        "snapshot parts entry lease_ms Infinity": {**good, "parts": {some_part: {**good["parts"][some_part],
                                                                                 "lease_ms": math.inf}}},
        "snapshot parts entry ts text": {**good, "parts": {some_part: {**good["parts"][some_part], "ts": "now"}}},
        "snapshot sources not entries": {**good, "sources": {"src-1": "a"}},
        "snapshot born text": {**good, "born": "yesterday"},
        "snapshot through text": {**good, "through": str(offset)},
        "snapshot chunk past of": {**good, "chunk": 1, "of": 1},
    }


@pytest.mark.parametrize("kind", sorted(BAD_RECORDS) + sorted(bad_snapshots(3)))
def test_a_malformed_record_in_the_middle_of_a_history_changes_nothing(kind):
    history = valid_history()
    value = BAD_RECORDS.get(kind) or encode(bad_snapshots(len(history))[kind])
    tail = [(4_000, encode(lease("x", "orders:0"))), (5_000, encode({"kind": "run-release", "run": "b"}))]
    with_it, outcomes = fold([*history, (3_500, value), *tail])
    without, expected = fold([*history, (3_500, PLACEHOLDER), *tail])
    assert outcomes == expected and not outcomes[len(history)]
    assert shape(with_it) == shape(without)
    assert then(with_it, 10) == then(without, 10) == [False, True, True, True, False]
    assert shape(with_it) == shape(without)


def test_a_malformed_record_is_unreadable_with_a_reason_and_never_raises():
    state, _ = fold(valid_history())
    for kind, value in BAD_RECORDS.items():
        record = claims_log._claim_of(value)
        if record is not None:
            assert not state.apply(3_500, record, 3) and state.unreadable, kind
    snapshot = bad_snapshots(3)["snapshot missing leased"]
    assert not state.apply(3_500, snapshot, 3) and "leased" in state.unreadable
    assert state.apply(3_600, lease("x", "orders:0"), 4) and state.unreadable is None


def test_a_snapshot_missing_a_part_replaces_nothing():
    """All or nothing: a snapshot whose `leased` is missing left runs and parts replaced before."""
    state, _ = fold(valid_history())
    kept = copy.deepcopy(shape(state))
    snapshot = Claims().snapshot(3)
    del snapshot["leased"]
    assert not state.apply(3_500, snapshot, 3)
    assert shape(state) == kept


GARBAGE_VALUES = {  # by field: values no record of that field may hold
    "run": [None, 1, 2.5, True, [], {}, ["a"], "a\x00b"],
    "topics": [None, "orders", 3, [1], [["o"]], {"o": 1}],
    "deployment": [None, 1, [], {}],
    "holder": [None, 1, [], {"x": 1}, True],
    "scope": [None, 1, [], {}],
    "lease_ms": [None, "x", "30000", True, [], {}, float("inf"), float("-inf"), float("nan"), -1],
    "force": ["yes", 1, None, []],
    "source_id": [1, [], {}, True],
    "pid": ["self", 1.5, [], True],
    "holders": [None, "x", [], ["t:0"], {"t:0": 1}, {"t:0": None}, {"t:0": ["x"]}],
}
BROKEN_SNAPSHOT = [("runs", ["x", [], {"k": 1}, {"k": {"run": "k", "topics": "o", "ts": 1}}]),
                   ("parts", ["x", [], {"t:0": 1}, {"t:0": {"holder": 1, "lease_ms": 1, "ts": 1}}]),
                   ("leased", [None, "t:0", [1], {}]),
                   ("sources", ["x", {"s": 1}, {"s": {"run": 1, "ts": 1}}])]


def random_record(rng: random.Random) -> dict:
    kind = rng.random()
    runs, deployments = "abc", ["", "kafka_migration@/s1", "kafka_dr_drill@/s2"]
    if kind < 0.25:
        deployment = rng.choice(deployments)
        return run_claim(rng.choice(runs), *rng.sample(["o", "p", "q", "r"], rng.randint(1, 2)),
                         deployment=deployment or None, **({"source_id": rng.choice("ST")} if rng.random() < 0.3 else {}))
    if kind < 0.35:
        record = {"kind": "run-release", "run": rng.choice(runs)}
        if rng.random() < 0.7:
            record["deployment"] = rng.choice(deployments)
        return record | ({"force": True} if rng.random() < 0.3 else {})
    if kind < 0.75:
        extra = {"breaks": rng.choice("xyz")} if rng.random() < 0.1 else {}
        extra.update({"target_empty": True} if rng.random() < 0.1 else {})
        return lease(rng.choice("xyz"), f"t:{rng.randint(0, 2)}", rng.choice([30_000, 29_999.5]), **extra)
    if kind < 0.85:
        return renewal({f"t:{p}": rng.choice("xyz") for p in rng.sample(range(3), rng.randint(1, 3))},
                       rng.choice([30_000, 29_999.5]))
    return {"kind": "lease-release", "scope": f"t:{rng.randint(0, 2)}", "holder": rng.choice("xyz")}


def garbage(rng: random.Random, valid: dict, state: Claims, offset: int) -> bytes | None:
    """A value no reader can fold: bytes that are no JSON object, or a record of ours with one field broken."""
    choice = rng.random()
    if choice < 0.1:
        return rng.choice([b"", b"\xff\xfe", b"not json", b"[1, 2]", b"42", b"null", DEEP[:2_000] + DEEP[-2_000:]])
    if choice < 0.3:
        snapshot = json.loads(json.dumps(state.snapshot(offset)))
        field, values = rng.choice(BROKEN_SNAPSHOT)
        return encode({**snapshot, field: rng.choice(values)})
    fields = [field for field in GARBAGE_VALUES if field in valid or field in ("deployment", "source_id", "force")]
    fields = [f for f in fields if (f, valid["kind"]) not in (("force", "run"), ("source_id", "run-release"),
                                                              ("force", "lease"), ("force", "lease-release"))]
    field = rng.choice([f for f in fields if valid["kind"] in KIND_FIELDS[f]])
    return encode({**valid, field: rng.choice(GARBAGE_VALUES[field])})


KIND_FIELDS = {"run": {"run", "run-release"}, "topics": {"run"}, "deployment": {"run", "run-release"},
               "holder": {"lease", "lease-release"}, "scope": {"lease", "lease-release"},
               "lease_ms": {"lease", "lease-renewal"}, "force": {"run-release"}, "source_id": {"run"},
               "pid": {"lease", "lease-renewal"}, "holders": {"lease-renewal"}}


@pytest.mark.parametrize("seed", range(30))
def test_random_histories_with_garbage_interleaved_fold_as_without_it(seed):
    """Every slot of garbage is a tombstone in the history without it (the same offsets); valid
    snapshots, in chunks, are taken at random points of the history without garbage."""
    rng = random.Random(seed)
    with_it, without = [], []
    reference = Claims()
    reference.born = 10_000
    ts = 10_000
    while len(without) < 400:
        ts += rng.choice((1, 500, 5_000, 31_000))
        offset = len(without)
        if rng.random() < 0.05:  # a snapshot of the state so far, in a few chunks, at its own offsets
            for chunk in reference.snapshot_chunks(offset, rng.choice((300, 600, 100_000))):
                reference.apply(ts, chunk, len(without))
                with_it.append((ts, encode(chunk)))
                without.append((ts, encode(chunk)))
            continue
        if rng.random() < 0.3:
            with_it.append((ts, garbage(rng, random_record(rng), reference, offset)))
            without.append((ts, PLACEHOLDER))
            continue
        record = random_record(rng)
        reference.apply(ts, record, offset)
        with_it.append((ts, encode(record)))
        without.append((ts, encode(record)))
    born = Claims()
    born.born = 10_000
    folded, outcomes = fold(with_it, born)
    clean = Claims()
    clean.born = 10_000
    expected_state, expected = fold(without, clean)
    assert outcomes == expected
    assert shape(folded) == shape(expected_state) == shape(reference)
    assert any(expected) and not all(expected)


def test_the_same_run_name_of_two_deployments_is_two_runs():
    state = Claims()
    assert state.apply(1, run_claim("scheduled__1", "orders", deployment="kafka_dr_drill@/state/a"))
    assert not state.apply(2, run_claim("scheduled__1", "orders", deployment="kafka_dr_drill@/state/b"))
    assert state.conflicts("scheduled__1", ["orders"], "kafka_dr_drill@/state/b") == {
        run_key("scheduled__1", "kafka_dr_drill@/state/a"): ["orders"]}
    assert state.conflicts("scheduled__1", ["orders"], "kafka_dr_drill@/state/a") == {}
    assert state.apply(3, run_claim("scheduled__1", "audit", deployment="kafka_dr_drill@/state/b"))
    assert not state.apply(4, run_claim("scheduled__1", "orders"))  # a claim of no deployment is a third
    assert sorted((c["run"], c["deployment"], tuple(c["topics"])) for c in state.runs.values()) == [
        ("scheduled__1", "kafka_dr_drill@/state/a", ("orders",)), ("scheduled__1", "kafka_dr_drill@/state/b", ("audit",))]
    assert state.holds(run_claim("scheduled__1", "audit", deployment="kafka_dr_drill@/state/b"))
    assert not state.holds(run_claim("scheduled__1", "orders", deployment="kafka_dr_drill@/state/b"))


def test_a_run_is_released_by_its_own_deployment_or_by_force():
    state = Claims()
    a, b = "kafka_migration@/a", "kafka_migration@/b"
    assert state.apply(1, run_claim("r", "orders", deployment=a))
    assert state.apply(2, run_claim("r", "audit", deployment=b))
    assert not state.apply(3, {"kind": "run-release", "run": "r", "deployment": "kafka_migration@/c"})
    assert not state.apply(4, {"kind": "run-release", "run": "r"})  # old-style: the claim of no deployment only
    assert state.holds({"kind": "run-release", "run": "r"})
    assert state.apply(5, {"kind": "run-release", "run": "r", "deployment": b})  # b's report
    assert [c["deployment"] for c in state.runs.values()] == [a]
    assert state.apply(6, run_claim("r", "audit", deployment=b))
    assert state.apply(7, {"kind": "run-release", "run": "r", "deployment": a, "force": True})  # by hand, one
    assert [c["deployment"] for c in state.runs.values()] == [b]
    assert state.apply(8, run_claim("r", "orders", deployment=a))
    assert state.apply(9, {"kind": "run-release", "run": "r", "force": True})  # by hand, every deployment
    assert state.runs == {} and state.holds({"kind": "run-release", "run": "r", "force": True})
    assert state.apply(10, run_claim("old", "x")) and state.apply(11, {"kind": "run-release", "run": "old"})


def test_the_refusal_names_the_holders_deployment_and_the_forced_release():
    state = Claims()
    state.apply(1_700_000_000_000, run_claim("nightly", "orders", deployment="kafka_dr_drill@/state/a"))
    exc = claims_runs._held_error("nightly", state.conflicts("nightly", ["orders"], "kafka_dr_drill@/state/b"), state,
                             "kafka_dr_drill@/state/b")
    text = str(exc)
    assert "run 'nightly' (deployment 'kafka_dr_drill@/state/b') is refused" in text
    assert "run 'nightly' of DAG 'kafka_migration' (deployment 'kafka_dr_drill@/state/a')" in text
    assert "python -m kmigrate.claims release nightly --force --deployment kafka_dr_drill@/state/a" in text
    assert "--config-file" in text and exc.holders == ["nightly"]
    assert "refused" in str(claims_runs._held_error("x", {}, state))  # its holder released them since: no IndexError


def test_records_of_older_versions_are_read_as_of_no_deployment():
    """An old snapshot: runs keyed by name with whole records as entries, leases with every field,
    no chunk, of or sources."""
    old = {"kind": "snapshot", "through": 5, "born": 1,
           "runs": {"a": {"kind": "run", "run": "a", "topics": ["o"], "dag": "d", "host": "h", "ts": 3}},
           "parts": {"o:0": {"kind": "lease", "scope": "o:0", "holder": "x", "run": "a", "lease_ms": 30_000, "ts": 4,
                             "breaks": "w", "target_empty": True, "pid": 9, "started": "5", "host": "h"}},
           "leased": ["o:0"]}
    state = Claims()
    assert state.apply(6, old, 5)
    assert state.runs == {"a": {"run": "a", "deployment": "", "topics": ["o"], "dag": "d", "host": "h", "ts": 3}}
    assert state.parts["o:0"] == {"holder": "x", "run": "a", "lease_ms": 30_000, "ts": 4, "pid": 9, "started": "5",
                                  "host": "h"}
    assert state.sources == {}
    assert not state.apply(7, run_claim("b", "o"), 6)
    assert state.apply(8, {"kind": "run-release", "run": "a"}, 7)  # an old claim, an old-style release


def test_the_sources_that_claimed_runs_are_kept_through_releases_and_snapshots():
    state = Claims()
    assert state.apply(1, run_claim("a", "o", source_id="cluster-A"))
    assert state.apply(2, run_claim("b", "p", source_id="cluster-A"))  # the first run is kept
    assert not state.apply(3, run_claim("c", "o", source_id="cluster-B"))  # refused: nothing came from B
    assert state.apply(4, {"kind": "run-release", "run": "a"})
    assert state.sources == {"cluster-A": {"run": "a", "ts": 1}}
    fresh = Claims()
    for offset, chunk in enumerate(state.snapshot_chunks(10, 300), 10):
        fresh.apply(5, json.loads(json.dumps(chunk)), offset)
    assert fresh.sources == state.sources and shape(fresh) == shape(state)


NOWHERE = ClusterConfig.from_bootstrap("target", "localhost:1")  # refused before any client is made


def test_claim_topics_refuses_a_claim_no_reader_could_fold():
    with pytest.raises(ConfigError, match="deployment"):
        claims_runs.claim_topics(NOWHERE, "r", ["t"], deployment=None)
    with pytest.raises(ConfigError, match="every deployment needs force"):
        claims_runs.release_topics(NOWHERE, "r", deployment=None)


def leased_state(partitions: int) -> Claims:
    """A state of `partitions` leased target partitions (mirrors of 1,000 topics), their runs claimed."""
    state = Claims()
    state.born = 1
    topics = [f"mirror.orders.region-{t:04d}" for t in range(partitions // 100)]
    for i, topic in enumerate(topics):
        state.apply(2 + i, run_claim(f"mirror-{i % 10}", topic, deployment="kafka_dr_mirror@s3://bucket/state"))
    for n in range(partitions):
        holder = f"mirror-{n % 10}/worker-{n % 37}.example.internal/{10_000 + n % 500}/{n:08x}"
        assert state.apply(100_000 + n, {**lease(holder, f"{topics[n // 100]}:{n % 100}", target_empty=True),
                                         "host": f"worker-{n % 37}.example.internal", "pid": 10_000 + n % 500,
                                         "started": str(123_456 + n), "run": f"mirror-{n % 10}"}, n)
    return state


def test_a_snapshot_of_100000_leased_partitions_is_written_in_records_under_the_topic_size_and_read_back_whole():
    began = time.monotonic()
    state = leased_state(100_000)
    through = 250_000
    chunks = state.snapshot_chunks(through, claims_log.SNAPSHOT_CHUNK_BYTES)
    sizes = [len(json.dumps(chunk, sort_keys=True).encode()) for chunk in chunks]  # as ClaimLog._append writes them
    # under the producer's message.max.bytes
    assert len(chunks) > 1 and max(sizes) <= claims_log.SNAPSHOT_CHUNK_BYTES < 1_000_000
    assert len(chunks) <= claims_log.SNAPSHOT_MAX_CHUNKS
    fresh = Claims()
    read = [json.loads(json.dumps(chunk)) for chunk in chunks]
    outcomes = [fresh.apply(300_000, chunk, through + i) for i, chunk in enumerate(read)]
    assert outcomes == [False] * (len(chunks) - 1) + [True]  # in effect with its last chunk, all at once
    assert shape(fresh) == shape(state) and len(fresh.parts) == 100_000
    # the same chunks with a record between two of them: in effect nowhere, the state as it was
    between = Claims()
    assert between.apply(1, run_claim("z", "t"), 0)
    for i, chunk in enumerate(read):
        assert not between.apply(300_000, chunk, through + i + (i >= 2))
    assert list(between.runs) == ["z"] and between.parts == {}
    assert time.monotonic() - began < 10


def test_chunks_of_a_snapshot_are_void_out_of_place():
    state = leased_state(300)
    chunks = [json.loads(json.dumps(c)) for c in state.snapshot_chunks(50, 8_000)]
    assert len(chunks) >= 3

    def fresh_fold(offsets: list[int], order: list[int]) -> Claims:
        fresh = Claims()
        for offset, i in zip(offsets, order, strict=True):
            fresh.apply(1, chunks[i], offset)
        return fresh
    n = len(chunks)
    assert shape(fresh_fold(list(range(50, 50 + n)), list(range(n)))) == shape(state)
    assert fresh_fold(list(range(51, 51 + n)), list(range(n))).parts == {}  # not at its through
    assert fresh_fold(list(range(50, 50 + n)), [0, 2, 1, *range(3, n)]).parts == {}  # out of order
    assert fresh_fold(list(range(50, 49 + n)), [i for i in range(n) if i != 1]).parts == {}  # one missing
    assert problem({**chunks[0], "of": 0}) is not None


def test_nothing_a_record_holds_raises_out_of_the_fold(monkeypatch):
    """The shape is checked first; were a check or a rule to fail on some record anyway, that record
    is skipped with the reason, and the next is folded."""
    state, _ = fold(valid_history())
    kept = copy.deepcopy(shape(state))
    monkeypatch.setattr(Claims, "_apply", lambda self, ts, record, offset: 1 / 0)
    assert not state.apply(4_000, lease("x", "orders:0"), 3) and "ZeroDivisionError" in state.unreadable
    monkeypatch.undo()
    monkeypatch.setattr("kmigrate.claims.state.problem", lambda record: record["no such field"])
    assert not state.apply(4_000, lease("x", "orders:0"), 3) and "KeyError" in state.unreadable
    monkeypatch.undo()
    assert shape(state) == kept and state.apply(4_001, lease("x", "orders:0"), 4)
