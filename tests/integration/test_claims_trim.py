"""The claims log kept short (kmigrate/claims/log.py) on the real target broker: a reader past
SNAPSHOT_AFTER records writes a snapshot and deletes below the snapshot before it; a process that
starts afterwards reads from a snapshot on and decides every later claim as one that read the whole
history, and a reader that was reading when the records below it went on with the same state."""
from __future__ import annotations

import json

from kmigrate.claims import log as claims_log
from kmigrate.claims.log import CLAIMS_TOPIC, ClaimLog
from kmigrate.claims.state import Claims
from kmigrate.kafka.admin import ClusterAdmin

from tests.support.kafka import records_of

EVERY = 40  # SNAPSHOT_AFTER for these tests: a few snapshots in a few hundred records


def lease(holder: str, scope: str) -> dict:
    return {"kind": "lease", "scope": scope, "holder": holder, "run": "trim-test", "lease_ms": 30_000}


def ours(state: Claims, prefix: str) -> dict:
    return {scope: part["holder"] for scope, part in state.parts.items() if scope.startswith(prefix)}


def test_a_trimmed_claims_log_gives_a_new_reader_and_a_lagging_one_the_state_of_the_whole_history(
        stack, unique_name, monkeypatch):
    monkeypatch.setattr(claims_log, "SNAPSHOT_AFTER", EVERY)
    writer, lagging = ClaimLog(stack.target), ClaimLog(stack.target)
    try:
        assert writer.submit(lease("h1", f"{unique_name}:0"))  # held through every trim below
        lagging.current()  # reading stops here; the records below its next offset are deleted meanwhile
        with ClusterAdmin(stack.target) as admin:
            start = admin.watermarks(CLAIMS_TOPIC, 0)[0]
        for n in range(1, 4 * EVERY):  # other partitions' leases, renewals among them
            assert writer.submit_all([lease("h1", f"{unique_name}:{n % 7}"), lease(f"w{n}", f"{unique_name}:x{n}")])
        with ClusterAdmin(stack.target) as admin:
            low, high = admin.watermarks(CLAIMS_TOPIC, 0)
        assert low > start, "the claims log was not trimmed"
        [(offset, _, value, _, _)] = records_of(stack.target, CLAIMS_TOPIC, 0, low, low + 1)
        first = json.loads(value)
        assert first["kind"] == "snapshot" and first["through"] == offset == low  # a snapshot that took effect
        assert ours(writer.state, unique_name)[f"{unique_name}:0"] == "h1"

        fresh = ClaimLog(stack.target)
        try:
            fresh.current()
            assert ours(fresh.state, unique_name) == ours(writer.current(), unique_name)
            assert not fresh.submit(lease("h2", f"{unique_name}:0"))  # h1's lease, claimed below the log start
            assert fresh.state.parts[f"{unique_name}:0"]["holder"] == "h1"
        finally:
            fresh.close()

        assert lagging.submit(lease("h1", f"{unique_name}:0"))  # a renewal: its reader jumps to the log start
        assert ours(lagging.state, unique_name) == ours(writer.current(), unique_name)
        assert not lagging.submit(lease("h3", f"{unique_name}:1"))
        assert high - low < 3 * EVERY + 200  # two snapshots' worth, and what the suite's other tests wrote meanwhile
    finally:
        writer.close()
        lagging.close()
