"""The run's snapshot as its manifest holds it (taken once, by the snapshot step:
`kmigrate.run.cutover.snapshot`), read back by the steps after it."""
from __future__ import annotations

from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part


def read_snapshot(manifest: Manifest) -> dict[str, Any]:
    snapshot = manifest.read(Part.SNAPSHOT)
    if snapshot is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no snapshot; run the snapshot step first")
    return snapshot
