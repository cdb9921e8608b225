"""The multi-broker stack for the fault tests: each cluster three KRaft nodes (broker and controller
in one process), topics with replication factor 3 and min.insync.replicas 2. Used if running,
started otherwise; what the fixture starts it stops again, by pid, after the fault tests.
Brokers a test kills are started again before the next test. The stack's helpers and the
record-by-record comparison are in tests/support/faults.py."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kmigrate.config import ClusterConfig

from tests.support.faults import BROKERS, MultiStack
from tests.support.stack import close_pooled_clients, load_stack_module


@pytest.fixture(scope="package")
def multi_stack() -> Iterator[MultiStack]:
    module = load_stack_module()
    state_dir = Path(os.environ.get("KMIGRATE_MULTI_STACK_DIR", module.MULTI_STATE_DIR)).resolve()
    clusters = module.multi_clusters(BROKERS)
    started = {s.name for s in module.up(clusters, state_dir, timeout_s=240)}
    stack = MultiStack(module, clusters, state_dir, ClusterConfig.from_bootstrap("source", clusters[0].bootstrap),
                       ClusterConfig.from_bootstrap("target", clusters[1].bootstrap))
    try:
        yield stack
    finally:
        close_pooled_clients()
        module.stop_all([s for s in module.services(clusters, state_dir) if s.name in started])


@pytest.fixture
def faulty(multi_stack: MultiStack) -> Iterator[MultiStack]:
    """The multi-broker stack with every broker up; brokers the test killed are started again after it."""
    multi_stack.restart_killed()
    try:
        yield multi_stack
    finally:
        close_pooled_clients()  # the copies' pooled clients of these clusters, which the next test does not use
        multi_stack.restart_killed()
