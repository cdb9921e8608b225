"""The mirror's consumer groups: each selected group's committed offsets on the mirrored topics,
copied to the DR cluster as they are (a mirror keeps the source's offsets, so nothing is
translated) with their metadata, each capped at the DR cluster's end of its partition (a group
failed over never points past what the DR cluster holds). A group with members on the DR cluster
is left alone (its consumers own its offsets there) and named."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError
from kmigrate.kafka.group_admin import Committed
from kmigrate.kafka.pool import shared_admin

# each status syncs the groups again, so a sync keeps to a short timeout: a source gone meanwhile holds
# the driver's heartbeat, and its stop (an unplanned failover's), back this long, not the admin's 30 s
SYNC_TIMEOUT_S = 2.0


def sync_groups(source: ClusterConfig, target: ClusterConfig, groups: Sequence[str],
                dr_ends: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Copy `groups`' offsets on the partitions of `dr_ends` ({partition: the DR cluster's end});
    a row a group: partitions, written (changed on the DR cluster), capped (committed past the DR
    cluster's end), or skipped (why)."""
    rows = []
    with shared_admin(source, SYNC_TIMEOUT_S) as source_admin, shared_admin(target, SYNC_TIMEOUT_S) as target_admin:
        for group in groups:
            committed = {k: c for k, c in source_admin.committed(group).items() if k in dr_ends}
            if not committed:
                continue
            members = target_admin.live_members(group)
            if members:
                rows.append({"group": group, "skipped": f"it has members on the DR cluster: {', '.join(members)}"})
                continue
            wanted = {k: Committed(min(c.offset, dr_ends[k]), c.metadata) for k, c in committed.items()}
            try:
                before = target_admin.committed(group)
                changed = {k: v for k, v in wanted.items() if before.get(k) != v}
                if changed:  # refused when a consumer joined on the DR cluster meanwhile: tried next round
                    target_admin.alter_group_offsets(group, changed)
            except KmigrateError as exc:
                rows.append({"group": group, "error": str(exc)})
                continue
            rows.append({"group": group, "partitions": len(wanted), "written": len(changed),
                         "capped": sum(1 for k, c in committed.items() if c.offset > dr_ends[k])})
    return rows
