"""The mirror's consumer groups: each selected group's committed offsets on the mirrored topics,
copied to the DR cluster as they are (a mirror keeps the source's offsets, so nothing is
translated) with their metadata, each capped at the DR cluster's end of its partition (a group
failed over never points past what the DR cluster holds). A group with members on the DR cluster
is left alone (its consumers own its offsets there) and named. A mirror that renames writes each
group under its id on the DR cluster, its offsets under the topics' names there."""
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
                dr_ends: Mapping[tuple[str, int], int], *, group_ids: Mapping[str, str] | None = None,
                names: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Copy `groups`' offsets on the partitions of `dr_ends` ({partition: the DR cluster's end}),
    each group under its id on the DR cluster (`group_ids`; not in it: its own) and its offsets
    under the topics' names there (`names`; likewise); a row a group: partitions, written (changed
    on the DR cluster), capped (committed past the DR cluster's end), or skipped (why), and its
    `dr_group` when it is renamed."""
    group_ids, names = group_ids or {}, names or {}
    rows = []
    with shared_admin(source, SYNC_TIMEOUT_S) as source_admin, shared_admin(target, SYNC_TIMEOUT_S) as target_admin:
        for group in groups:
            committed = {k: c for k, c in source_admin.committed(group).items() if k in dr_ends}
            if not committed:
                continue
            on_dr = group_ids.get(group, group)
            row = {"group": group, **({"dr_group": on_dr} if on_dr != group else {})}
            members = target_admin.live_members(on_dr)
            if members:
                rows.append({**row, "skipped": f"it has members on the DR cluster: {', '.join(members)}"})
                continue
            wanted = {(names.get(t, t), p): Committed(min(c.offset, dr_ends[(t, p)]), c.metadata)
                      for (t, p), c in committed.items()}
            try:
                before = target_admin.committed(on_dr)
                changed = {k: v for k, v in wanted.items() if before.get(k) != v}
                if changed:  # refused when a consumer joined on the DR cluster meanwhile: tried next round
                    target_admin.alter_group_offsets(on_dr, changed)
            except KmigrateError as exc:
                rows.append({**row, "error": str(exc)})
                continue
            rows.append({**row, "partitions": len(wanted), "written": len(changed),
                         "capped": sum(1 for k, c in committed.items() if c.offset > dr_ends[k])})
    return rows
