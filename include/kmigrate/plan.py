"""Copy plans: the partition work units of a run, stored in its manifest, and the client configs
the Spark jobs read from a file with restricted permissions (secrets never travel in arguments)."""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig
from kmigrate.copier import PRESERVE, TRANSLATE, WorkUnit
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest

PLAN_PART = "plan"


def build_plan(source: ClusterConfig, topics: Iterable[str], modes: dict[str, str] | None = None) -> dict[str, Any]:
    """One unit per partition of each topic, up to its current end, largest first."""
    units = []
    with ClusterAdmin(source) as admin:
        for topic in topics:
            mode = (modes or {}).get(topic, PRESERVE)
            if mode not in (PRESERVE, TRANSLATE):
                raise ConfigError(f"topic {topic!r}: mode {mode!r} is not 'preserve' or 'translate'")
            for partition in range(admin.require_partition_count(topic)):
                low, high = admin.watermarks(topic, partition)
                units.append({"topic": topic, "partition": partition, "end_offset": high, "mode": mode,
                              "offsets": high - low})
    units.sort(key=lambda u: (-u["offsets"], u["topic"], u["partition"]))
    return {"units": units}


def work_units(plan: dict[str, Any]) -> list[WorkUnit]:
    return [WorkUnit(u["topic"], u["partition"], u["end_offset"], u["mode"]) for u in plan["units"]]


def read_plan(manifest: Manifest) -> dict[str, Any]:
    plan = manifest.read(PLAN_PART)
    if plan is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no plan; run the snapshot step first")
    return plan


def load_clients(path: str | os.PathLike[str]) -> tuple[ClusterConfig, ClusterConfig]:
    """Source and target client configs from a JSON file {"source": {...}, "target": {...}} that only
    its owner may read (it may hold SASL passwords)."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"client config file {file} cannot be read ({exc.strerror}); check the path") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"client config file {file} is readable by others (mode {stat.S_IMODE(mode):o}); "
                          f"it may hold credentials: chmod 600 {file}")
    try:
        data = json.loads(file.read_text())
        return ClusterConfig("source", data["source"]), ClusterConfig("target", data["target"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"client config file {file} must be JSON with 'source' and 'target' objects ({exc})") from exc


def write_clients(path: str | os.PathLike[str], source: ClusterConfig, target: ClusterConfig) -> Path:
    """Write the client config file with owner-only permissions."""
    file = Path(path)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"source": dict(source.settings), "target": dict(target.settings)}, handle)
    os.chmod(file, 0o600)
    return file
