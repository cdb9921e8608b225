"""A DR drill's recovery figures: RPO and RTO."""
from __future__ import annotations

import datetime
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part


def measure_drill(manifest: Manifest, source: ClusterConfig, triggered_at: datetime.datetime) -> dict[str, Any]:
    """A DR drill's recovery figures, once its copy is verified: RPO as the records the source has
    beyond the snapshot now (and the seconds since the snapshot), RTO as the seconds from the
    trigger to now. Recorded once per run (part drill)."""
    def compute() -> dict[str, Any]:
        snapshot = manifest.read(Part.SNAPSHOT)
        if snapshot is None:
            raise ConfigError(f"the run manifest at {manifest.location} has no snapshot; run the snapshot step first")
        now = datetime.datetime.now(datetime.timezone.utc)
        behind = 0
        with ClusterAdmin(source) as admin:
            for topic, entry in snapshot["topics"].items():
                for p in entry["partitions"]:
                    behind += admin.watermarks(topic, p["partition"])[1] - p["end"]
        taken = datetime.datetime.fromisoformat(snapshot["taken_at"])
        return {"rpo_records": behind, "rpo_seconds": round((now - taken).total_seconds(), 3),
                "rto_seconds": round((now - triggered_at).total_seconds(), 3), "measured_at": now.isoformat()}
    return manifest.get_or_create(Part.DRILL, compute)
