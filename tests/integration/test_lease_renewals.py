"""A task's thousands of leases renewed together on the real claims topic: a few records a round, each
of thousands of leases, and every lease held past its length while a rival's claim stays void."""
from __future__ import annotations

import collections
import json

from kmigrate.claims import leases
from kmigrate.claims.leases import RENEWAL_LEASES, PartitionLease
from kmigrate.claims.log import CLAIMS_TOPIC, claim_log
from kmigrate.kafka.admin import ClusterAdmin

from tests.support.kafka import create_topic, records_of
from tests.support.waiting import wait_until

LEASES = 3_000  # two records a round: 2,000 and 1,000


def test_three_thousand_leases_are_renewed_in_two_records_a_round_and_stay_held(stack, unique_name):
    held = [PartitionLease(stack.target, "run-renewals", unique_name, p, lease_s=2.0) for p in range(LEASES)]
    # a claims log younger than two leases grants a lease only on a target partition found empty: these
    # partitions do not exist, so the log (a fresh stack's) gets a first record on a real one, and ages
    create_topic(stack.target, f"{unique_name}-warm")
    warm = PartitionLease(stack.target, "run-renewals", f"{unique_name}-warm", 0, lease_s=2.0)
    warm.acquire()
    warm.release()
    wait_until(lambda: not held[0]._young_log(), "the claims log older than two leases", 30, poll_s=0.2)
    rival = PartitionLease(stack.target, "run-rival", unique_name, 7, lease_s=2.0)
    with ClusterAdmin(stack.target) as admin:
        start = admin.watermarks(CLAIMS_TOPIC, 0)[1]
    leases.acquire_all(held)
    try:
        assert all(lease.held() for lease in held)
        taken = [lease._confirmed for lease in held]
        for _ in range(3):  # three rounds, each renewing every lease (a round every 0.4 s)
            before = [lease._confirmed for lease in held]
            wait_until(lambda before=before: all(lease._confirmed > b for lease, b in zip(held, before)),
                       "every lease renewed", 10, poll_s=0.05)
        assert all(lease.held() for lease in held)
        assert min(lease._confirmed for lease in held) > max(taken) + 0.8  # renewed past two fifths of a lease
        leases.acquire_all([rival])
        assert not rival.held()  # held and renewed: the rival's claim is void
        with ClusterAdmin(stack.target) as admin:
            end = admin.watermarks(CLAIMS_TOPIC, 0)[1]
    finally:
        leases.release_all(held)
    mine = [json.loads(value) for _, _, value, _, _ in records_of(stack.target, CLAIMS_TOPIC, 0, start, end)
            if value and unique_name in value.decode()]
    renewals = [record for record in mine if record["kind"] == "lease-renewal"]
    assert all(len(record["holders"]) <= RENEWAL_LEASES for record in renewals)
    renewed = collections.Counter(scope for record in renewals for scope in record["holders"])
    assert min(renewed[f"{unique_name}:{p}"] for p in range(LEASES)) >= 3
    assert len(renewals) <= 2 * (max(renewed.values()) + 1)  # two records a round, not 3,000
    assert {record["kind"] for record in mine} == {"lease", "lease-renewal"}  # no lease record a renewal
    parts = claim_log(stack.target).current().parts
    assert not any(f"{unique_name}:{p}" in parts for p in range(LEASES))
