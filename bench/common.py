"""What the benchmark scripts share: removing what a benchmark created, so that a run leaves no
data behind on the local clusters. (The migration itself never deletes anything.)"""
from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import AdminClient

from kmigrate.config import ClusterConfig


def delete_topics(cluster: ClusterConfig, topics: Iterable[str]) -> list[str]:
    """Delete those of `topics` that exist on `cluster`; returns them."""
    admin = AdminClient(cluster.admin())
    present = sorted(set(topics) & set(admin.list_topics(timeout=30).topics))
    if present:
        for future in admin.delete_topics(present, operation_timeout=60).values():
            future.result(timeout=90)
    return present


def delete_groups(cluster: ClusterConfig, groups: Iterable[str]) -> None:
    """Delete `groups` on `cluster`; a group that does not exist there is fine."""
    groups = list(groups)
    if not groups:
        return
    admin = AdminClient(cluster.admin())  # kept referenced: a collected client never completes its futures
    for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
        try:
            future.result(timeout=60)
        except Exception:  # noqa: BLE001 - the group was never created on this cluster
            pass
