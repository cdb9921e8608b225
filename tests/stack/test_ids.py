"""The stack's KRaft cluster ids: kafka-storage's argument parser takes a value that begins with '-'
for an option, so the stack never generates one (one id in 64 did, and `up` failed to format)."""
from __future__ import annotations

import uuid

from tests.support.stack import load_stack_module

stack = load_stack_module()


def test_a_cluster_id_that_would_begin_with_a_dash_is_drawn_again(monkeypatch):
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    cluster_id = stack.new_cluster_id()
    assert cluster_id == "EAAAAAAAAAAAAAAAAAAAAA"
    assert len(cluster_id) == 22


def test_no_cluster_id_begins_with_a_dash():
    assert not [i for i in (stack.new_cluster_id() for _ in range(2000)) if i.startswith("-")]
