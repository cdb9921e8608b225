"""Consecutive record batches joined into one (kmigrate.kafka.merge): seeded batches of random records
(keys, values, headers, timestamps before and after their batch's base) are encoded and decoded by
tests/support/wire.py, independently of the module; the joined batches hold the same records at the same offsets."""
from __future__ import annotations

import random

import pytest
from kmigrate.kafka import merge

from tests.support.wire import random_batches, records_of, v2_batch


@pytest.mark.parametrize("seed", range(20))
def test_joined_batches_hold_every_record_at_its_offset_with_its_content(seed):
    rng = random.Random(seed)
    batches = random_batches(rng, rng.randint(0, 10**6), rng.randint(1, 60))
    limit = rng.choice([2_000, 20_000, 256 << 10])
    joined = merge.join(batches, limit)
    assert [r for b in joined for r in records_of(b)] == [r for b in batches for r in records_of(b)]
    as_came = {id(b) for b in batches}
    assert all(len(b.data) <= limit for b in joined if id(b) not in as_came)
    assert len(joined) <= len(batches)
    if limit == 256 << 10:
        assert len(joined) == 1


def test_batches_that_do_not_hold_together_stay_as_they_came():
    rng = random.Random(7)
    a, b, c = random_batches(rng, 100, 3)
    gap = v2_batch(c.last_offset + 5, [(1, None, b"v", [])])  # not where the batch before ends
    compressed = v2_batch(gap.last_offset + 1, [(1, b"k", b"v", [])], attributes=1)  # gzip: not joined
    out = merge.join([a, b, c, gap, compressed], 256 << 10)
    assert [x.base_offset for x in out] == [a.base_offset, gap.base_offset, compressed.base_offset]
    assert out[1] is gap and out[2] is compressed
    assert records_of(out[0]) == records_of(a) + records_of(b) + records_of(c)
    assert merge.join([a], 256 << 10) == [a]
