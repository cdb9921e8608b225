"""What a run was asked to do (its params at the first trigger), kept in its manifest: the same
run name triggered again with other params is refused before anything is done, since its manifest
already records a snapshot, plans and copies made for the first request."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kmigrate.errors import RunConflict
from kmigrate.manifest import Manifest, Part

# how a run executes, not what it does: these may change between tries of one run
EXECUTION_PARAMS = frozenset({"dry_run", "spark_remote", "spark_parallelism"})


def _what(params: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps({k: v for k, v in params.items() if k not in EXECUTION_PARAMS}, default=str))


def check_request(manifest: Manifest, params: Mapping[str, Any]) -> None:
    """Refuse `params` when the run's recorded request differs (read-only)."""
    recorded = manifest.read(Part.PARAMS)
    if recorded is None:
        return
    wanted, before = _what(params), recorded["params"]
    differ = sorted(k for k in set(wanted) | set(before) if wanted.get(k) != before.get(k))
    if differ:
        detail = "; ".join(f"{k}: {before.get(k)!r} then, {wanted.get(k)!r} now" for k in differ)
        raise RunConflict(
            f"run {manifest.run_id!r} was started with other params ({detail}). A run name names one migration: "
            f"trigger it again with the params it was started with to continue or confirm it, or choose a new "
            f"run_name for a new migration. Nothing was done")


def record_request(manifest: Manifest, params: Mapping[str, Any]) -> dict[str, Any]:
    """The run's request, recorded by its first non-dry trigger (a re-run keeps it)."""
    check_request(manifest, params)
    return manifest.get_or_create(Part.PARAMS, lambda: {"params": _what(params)})
