"""The claims log on the real target broker as a trusted log of untrusted records (kmigrate.claims):
a malformed record written into `kmigrate-claims` by another producer is read past by a new reader
(each kind a row of `make test-bad-input`),
with a warning naming its offset, and claims, leases and conflicts go on; the same run name of two
deployments is two runs; a snapshot in chunks trims the log. Other tests write to the same topic at
the same time: each asserts only on its own runs and scopes."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from kmigrate.claims import log as claims_log
from kmigrate.claims.log import CLAIMS_TOPIC, ClaimLog, claim_log, received_from
from kmigrate.claims.records import run_key
from kmigrate.claims.runs import check_topics_free, claim_topics, release_topics
from kmigrate.errors import TopicsHeld
from kmigrate.kafka.admin import ClusterAdmin

from tests.support.badinput import survived
from tests.support.kafka import records_of
from tests.support.waiting import wait_until


def lease(holder: str, scope: str, **extra) -> dict:
    # target_empty: a claims log younger than a lease (a stack just started) grants it all the same
    return {"kind": "lease", "scope": scope, "holder": holder, "run": "records-test", "lease_ms": 30_000,
            "target_empty": True, **extra}


def snapshot(through: int, **wrong) -> dict:
    good = {"kind": "snapshot", "through": through, "born": 1, "leased": ["x:0"],
            "runs": {"z": {"run": "z", "topics": ["everything"], "ts": 1}},
            "parts": {"x:0": {"holder": "z", "lease_ms": 30_000, "ts": 1}}}
    return {key: value for key, value in {**good, **wrong}.items() if value is not None}


BAD = {  # kind -> the value, given the offset it will likely land at (a snapshot is read as one only there)
    "nested 100,000 deep": lambda at: b"[" * 100_000 + b"]" * 100_000,
    "lease_ms Infinity": lambda at: json.dumps(lease("w", "bad:0", lease_ms=float("inf"))).encode(),
    "lease_ms 1e400": lambda at: json.dumps(lease("w", "bad:0", lease_ms=7)).replace("7", "1e400").encode(),
    "lease_ms true": lambda at: json.dumps(lease("w", "bad:0", lease_ms=True)).encode(),
    "lease holder not a string": lambda at: json.dumps({**lease("w", "bad:0"), "holder": 5}).encode(),
    "run topics not strings": lambda at: json.dumps({"kind": "run", "run": "bad", "topics": ["t", 1]}).encode(),
    "snapshot runs a string": lambda at: json.dumps(snapshot(at, runs="all")).encode(),
    "snapshot runs entries not objects": lambda at: json.dumps(snapshot(at, runs={"z": ["everything"]})).encode(),
    "snapshot missing leased": lambda at: json.dumps({k: v for k, v in snapshot(at).items() if k != "leased"}).encode(),
    "snapshot parts of another shape": lambda at: json.dumps(snapshot(at, parts={"x:0": {"holder": 1}})).encode(),
}


def produce_raw(cluster, value: bytes) -> int:
    """`value` appended to the claims topic by a producer of no claims log; its offset."""
    delivered = []
    producer = Producer(cluster.producer(acks="all"))
    producer.produce(CLAIMS_TOPIC, key=b"records-test", value=value, partition=0,
                     on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(30) == 0 and isinstance(delivered[0], int), delivered
    return delivered[0]


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_malformed_record_in_the_claims_topic_stops_no_claim_and_no_lease(stack, unique_name, caplog, kind):
    claim_log(stack.target).submit({"kind": "lease-release", "scope": f"{unique_name}:0", "holder": "none"})  # topic
    with ClusterAdmin(stack.target) as admin:
        high = admin.watermarks(CLAIMS_TOPIC, 0)[1]
    offset = produce_raw(stack.target, BAD[kind](high))
    run, topic, deployment = unique_name, f"{unique_name}.orders", "records-test@/state/a"
    fresh = ClaimLog(stack.target, timeout_s=10)  # a new process's reader: from the log start, past the record
    try:
        with caplog.at_level(logging.WARNING, logger="kmigrate.claims.log"):
            survived(f"claims record: {kind}", fresh.current)
        assert fresh._next > offset and "z" not in fresh.state.runs
        warned = [r.getMessage() for r in caplog.records if f"offset {offset} of {CLAIMS_TOPIC}" in r.getMessage()]
        assert warned and all("skipped" in text for text in warned), caplog.text
        claim_topics(stack.target, run, [topic], dag="records-test", deployment=deployment)
        with pytest.raises(TopicsHeld, match=run):
            check_topics_free(stack.target, f"other-{run}", [topic])
        assert fresh.submit(lease("h1", f"{topic}:0"))
        assert not fresh.submit(lease("h2", f"{topic}:0"))  # held: the conflict is seen
        assert fresh.state.conflicts(f"other-{run}", [topic]) == {run_key(run, deployment): [topic]}
        assert fresh.submit({"kind": "lease-release", "scope": f"{topic}:0", "holder": "h1"})
        assert release_topics(stack.target, run, deployment=deployment)
        check_topics_free(stack.target, f"other-{run}", [topic])
    finally:
        fresh.close()


def test_two_deployments_of_one_run_name_do_not_share_a_claim(stack, unique_name, tmp_path):
    run, topic = f"scheduled__{unique_name}", f"{unique_name}.orders"
    a, b = f"{tmp_path}/a", f"{tmp_path}/b"  # two Airflow deployments' state locations
    claim_topics(stack.target, run, [topic], dag="kafka_dr_drill", deployment=a, source_id=f"src-{unique_name}")
    with pytest.raises(TopicsHeld) as refused:
        claim_topics(stack.target, run, [topic], dag="kafka_dr_drill", deployment=b)
    assert f"(deployment {a!r})" in str(refused.value) and "--force --deployment" in str(refused.value)
    check_topics_free(stack.target, run, [topic], deployment=a)  # its own
    assert not release_topics(stack.target, run, deployment=b)  # b's report releases nothing of a's
    assert not release_topics(stack.target, run)  # nor does an old-style release
    fresh = ClaimLog(stack.target, timeout_s=10)
    try:
        held = [claim for claim in fresh.current().runs.values() if claim["run"] == run]
        assert [(claim["deployment"], claim["topics"]) for claim in held] == [(a, [topic])]
    finally:
        fresh.close()
    assert received_from(stack.target)[f"src-{unique_name}"]["run"] == run
    env = {"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"}
    cli = [sys.executable, "-m", "kmigrate.claims", "release", run, "--bootstrap-servers", stack.target.bootstrap_servers]
    unforced = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=env)
    assert unforced.returncode == 1 and repr(a) in unforced.stderr and "--force" in unforced.stderr, unforced.stderr
    assert release_topics(stack.target, run, deployment=a)  # a's report
    claim_topics(stack.target, run, [topic], dag="kafka_dr_drill", deployment=b)
    forced = subprocess.run([*cli, "--force"], capture_output=True, text=True, timeout=60, env=env)
    assert forced.returncode == 0 and "its topics are released" in forced.stdout, forced.stderr
    check_topics_free(stack.target, f"other-{run}", [topic])
    assert received_from(stack.target)[f"src-{unique_name}"]["run"] == run  # kept through the releases


def test_received_from_writes_nothing_and_creates_no_claims_topic(stack, monkeypatch):
    monkeypatch.setattr(claims_log, "SNAPSHOT_AFTER", 1)  # a reader that trims would write a snapshot now
    monkeypatch.setattr(ClaimLog, "_append", lambda self, records: pytest.fail(f"received_from wrote {records}"))
    assert isinstance(received_from(stack.target), dict)
    with ClusterAdmin(stack.source) as admin:
        if CLAIMS_TOPIC in admin.list_topics():
            pytest.skip("the source cluster has a claims topic (a failback test wrote one)")
    assert received_from(stack.source) == {}
    with ClusterAdmin(stack.source) as admin:
        assert CLAIMS_TOPIC not in admin.list_topics()


CHUNK_BYTES = 2_000  # at least; more where the stack's claims state is large (`chunk_bytes`)


def chunk_bytes(state_bytes: int) -> int:
    """A chunk size that cuts a state of `state_bytes` (the test's 40 leases, whatever else the suite's and
    a long-lived stack's claims hold) into more than one chunk and well under SNAPSHOT_MAX_CHUNKS."""
    return max(CHUNK_BYTES, state_bytes // (claims_log.SNAPSHOT_MAX_CHUNKS // 5))


def test_a_snapshot_in_chunks_trims_the_log_and_a_new_reader_starts_from_its_first_chunk(
        stack, unique_name, monkeypatch):
    monkeypatch.setattr(claims_log, "SNAPSHOT_AFTER", 40)
    writer = ClaimLog(stack.target, timeout_s=10)
    try:
        assert all(writer.submit_all([lease("h1", f"{unique_name}:{n}") for n in range(40)]))
        # chunks so small that the test's own 40 leases (each over 100 bytes) fill more than one (at 6,000 bytes, a
        # state of little more than them fitted in one once), so many that a long-lived stack's state still fits
        bound = chunk_bytes(len(json.dumps(writer.state.snapshot(0))))
        monkeypatch.setattr(claims_log, "SNAPSHOT_CHUNK_BYTES", bound)
        with ClusterAdmin(stack.target) as admin:
            start = admin.watermarks(CLAIMS_TOPIC, 0)[0]

        def trimmed() -> tuple[int, dict] | None:
            # a trim deletes below the snapshot before the newest: at first that may be one written with the
            # default chunk size (the writer's first, as it read a long log, or another process's), in one chunk
            writer.submit_all([lease("h1", f"{unique_name}:{n}") for n in range(0, 40, 4)])
            with ClusterAdmin(stack.target) as admin:
                low = admin.watermarks(CLAIMS_TOPIC, 0)[0]
            first = records_of(stack.target, CLAIMS_TOPIC, 0, low, low + 1) if low > start else []
            record = json.loads(first[0][2]) if first else {}
            return (low, record) if record.get("kind") == "snapshot" and record.get("of", 1) > 1 else None
        low, record = wait_until(trimmed, "the claims log trimmed below a snapshot in chunks", 60, poll_s=0)
        assert record["through"] == low and record["chunk"] == 0
        chunks = records_of(stack.target, CLAIMS_TOPIC, 0, low, low + record["of"])
        assert [json.loads(value)["chunk"] for _, _, value, _, _ in chunks] == list(range(record["of"]))

        def entries(chunk: dict) -> int:
            return len(chunk["runs"]) + len(chunk["parts"]) + len(chunk["leased"]) + len(chunk["sources"])

        def within(values: list[bytes]) -> bool:  # at most the bound, unless one entry alone is larger
            return all(len(v) <= bound or entries(json.loads(v)) == 1 for v in values)

        # the snapshot the log starts at may be another process's (the suite's other workers snapshot with the
        # default chunk size): this writer's are those after it, each whole and within the bound
        with ClusterAdmin(stack.target) as admin:
            end = admin.watermarks(CLAIMS_TOPIC, 0)[1]
        snapshots: dict[int, list[bytes]] = {}
        for offset, _, value, _, _ in records_of(stack.target, CLAIMS_TOPIC, 0, low, end):
            rec = json.loads(value)
            if isinstance(rec, dict) and rec.get("kind") == "snapshot" and rec.get("of", 1) > 1:
                snapshots.setdefault(rec["through"], []).append(value)
        ours = [values for values in snapshots.values() if within(values)]
        assert ours, {through: [len(v) for v in values] for through, values in snapshots.items()}
        fresh = ClaimLog(stack.target, timeout_s=10)
        try:
            fresh.current()
            mine = {scope: part["holder"] for scope, part in fresh.state.parts.items() if scope.startswith(unique_name)}
            assert mine == {f"{unique_name}:{n}": "h1" for n in range(40)}
            assert not fresh.submit(lease("h2", f"{unique_name}:3"))
        finally:
            fresh.close()
    finally:
        writer.submit_all([{"kind": "lease-release", "scope": f"{unique_name}:{n}", "holder": "h1"} for n in range(40)])
        writer.close()
