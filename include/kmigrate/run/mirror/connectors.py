"""The connectors of a mirrored source, kept for an unplanned failover (docs/DESIGN.md §12).

As the mirror goes, `ConnectorWatch` reads the selected connectors of the source Connect cluster
(type, config with its literal secrets left out, state, offsets: the snapshot step's reading) every
`every_s`. A reading becomes the part `mirror-connectors` only once it is *safe*: once the DR
cluster holds every record the source held when the reading was taken (its ends at or past the
source ends read after it). A source connector's offsets are committed after its records are on
the source, so a connector started on the DR cluster from a safe reading skips none of its
records: it writes again, at most, those it wrote between the reading and the failover (Connect's
own at-least-once, as after a worker's crash). A sink connector's offsets are capped at the DR ends
when it is placed, so it reads every record the DR cluster holds from where it was.

`promote_connectors` places them on the DR Connect cluster when the source is gone: each created
STOPPED with its config (bootstrap addresses pointed at the DR cluster, the user's overrides) and
its last safe offsets, then brought into the state it had on the source."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, ConnectError
from kmigrate.kafka import ends as kafka_ends
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.connectors.migrate import exists_alike, place_stopped, renamed_target_config, restore_states
from kmigrate.run.connectors.renamed import renamed_offsets
from kmigrate.run.cutover.snapshot import snapshot_connectors
from kmigrate.run.mirror.spec import mirror_renames
from kmigrate.run.mirror.status import STATUS_TIMEOUT_S
from kmigrate.run.records import timeline

CONNECTORS = "mirror-connectors"  # the last safe reading of the mirrored source's connectors
Key = tuple[str, int]


class ConnectorWatch:
    """Readings of `names` on the `connect` cluster (the mirrored source's), each kept as the part
    CONNECTORS once the DR cluster (`target`) holds what `source` did when it was taken (`tick`)."""

    def __init__(self, manifest: Manifest, source: ClusterConfig, target: ClusterConfig, connect: ConnectClient,
                 names: list[str], every_s: float = 5.0, say: Callable[[str], None] = print) -> None:
        self.manifest, self.source, self.target = manifest, source, target
        self.connect, self.names, self.every_s, self.say = connect, sorted(names), every_s, say
        self.read_at = float("-inf")
        self.pending: list[dict[str, Any]] = []  # readings not yet safe, oldest first
        self.failing: str | None = None

    def tick(self, keys: Sequence[Key], names: Mapping[str, str] | None = None) -> None:
        """Each pending reading without ends gets the source's ends now (its high watermarks: the
        connector's records may lie past an open transaction of another producer), what the DR
        cluster must hold for it; the newest reading whose ends the DR cluster holds, committed, is
        written; a new reading is taken when one is due. A Connect cluster away is said once, and
        the last safe reading stays. `names`: the topics' names on the DR cluster (the mirror's renames)."""
        if any(r["needs"] is None for r in self.pending):
            (now,) = kafka_ends.read(self.source, keys, (kafka_ends.HIGH,), STATUS_TIMEOUT_S, retry=True)
            for reading in self.pending:
                reading["needs"] = now if reading["needs"] is None else reading["needs"]
        if self.pending:
            (held,) = kafka_ends.read(self.target, keys, (kafka_ends.STABLE,), STATUS_TIMEOUT_S, retry=True,
                                      names=names)
            safe = [r for r in self.pending if all(held.get(k, -1) >= end for k, end in r["needs"].items())]
            if safe:
                self.pending = self.pending[self.pending.index(safe[-1]) + 1:]
                self.manifest.replace(CONNECTORS, {"read_at": safe[-1]["read_at"], "safe_at": timeline.iso(time.time()),
                                                   "connectors": safe[-1]["connectors"]})
        # a DR cluster far behind: no new reading while a few wait (the oldest is safe first; dropping it
        # for a newer one, whose needs are higher, could leave none ever safe)
        if time.monotonic() - self.read_at < self.every_s or len(self.pending) >= 3:
            return
        self.read_at = time.monotonic()
        try:
            connectors = snapshot_connectors(self.connect, self.names)
        except (ConnectError, ConfigError) as exc:
            if self.failing is None:
                self.say(f"the source's connectors could not be read ({exc}); the last safe reading is kept")
            self.failing = str(exc)
            return
        self.failing = None
        self.pending.append({"read_at": timeline.iso(time.time()), "connectors": connectors, "needs": None})


def capped(entry: Mapping[str, Any], dr_ends: Mapping[Key, int]) -> list[dict[str, Any]]:
    """The reading's offsets as the DR cluster can honour them: a sink connector's each at most its
    partition's DR end; a source connector's (positions in its external system) as they are."""
    if entry["type"] != "sink":
        return [dict(o) for o in entry["offsets"]]
    out = []
    for o in entry["offsets"]:
        key = (o["partition"]["kafka_topic"], int(o["partition"]["kafka_partition"]))
        offset = int(o["offset"]["kafka_offset"])
        out.append({"partition": dict(o["partition"]),
                    "offset": {"kafka_offset": min(offset, dr_ends[key]) if key in dr_ends else offset}})
    return out


def with_secrets(name: str, entry: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, str]:
    """The reading's config with its literal secrets from `overrides` (the source worker, which
    held them, is gone); ConfigError naming the keys not given (never a value)."""
    keys = list(entry.get("secret_keys", []))
    missing = [k for k in keys if k not in (overrides or {})]
    if missing:
        raise ConfigError(f"connector {name!r} has secrets ({', '.join(missing)}) that the mirror does not store, and "
                          "the source Connect cluster that held them is gone; give them in connector_overrides "
                          f'({{"{name}": {{"{missing[0]}": "..."}}}}) or keep them in a config provider, then retry '
                          "(nothing was created)")
    return dict(entry["config"])


def kept(mirror: Manifest, dr_connect: ConnectClient | None, what: str) -> dict[str, Any] | None:
    """The mirror's last safe reading of the connectors (None: it keeps none); ConfigError when it
    keeps some and no DR Connect cluster is given to the `what` (failover, drill)."""
    reading = mirror.read(CONNECTORS)
    if reading is not None and dr_connect is None:
        raise ConfigError(f"the mirror of run {mirror.run_id} keeps {len(reading['connectors'])} connectors, but the "
                          f"{what} has no DR Connect cluster to place them on; name its connection "
                          "(target_connect_conn_id)")
    return reading


def on_dr(name: str, entry: Mapping[str, Any], dr_bootstrap: str | None,
          overrides: Mapping[str, Mapping[str, Any]] | None, names: Mapping[str, str] | None = None,
          keys: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """A kept connector's config on the DR Connect cluster: the topics it names under their names
    there (`names`, the mirror's renames, and `keys` its connector_topic_keys: `renamed.renamed_config`),
    its bootstrap addresses the DR cluster's, the user's overrides (and secrets) applied."""
    own = (overrides or {}).get(name)
    return renamed_target_config(name, entry["type"], with_secrets(name, entry, own), names or {},
                                 keys=(keys or {}).get(name, ()), target_bootstrap=dr_bootstrap, overrides=own)


def offsets_on_dr(entry: Mapping[str, Any], dr_ends: Mapping[Key, int], names: Mapping[str, str] | None = None
                  ) -> list[dict[str, Any]]:
    """A kept connector's offsets as placed on the DR cluster: `capped` at the DR ends (keyed by the
    source's names), a sink's then under the topics' names there (`names`)."""
    offsets = capped(entry, dr_ends)
    return renamed_offsets(offsets, names) if names and entry["type"] == "sink" else offsets


def promote_connectors(manifest: Manifest, dr_connect: ConnectClient | None, dr_ends: Mapping[Key, int], *,
                       dr_bootstrap: str | None = None, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                       wait_s: float = 60.0, names: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The last safe reading's connectors on `dr_connect`, each in the state it had on the source
    (None: the mirror watched no connector), the topics they name under their names there
    (`names`; `dr_ends` keyed by the source's names). Idempotent: a connector placed by an earlier
    attempt is left as it is. Everything is checked before anything is created."""
    reading = kept(manifest, dr_connect, "failover")
    if reading is None:
        return None
    prepared = []
    keys = mirror_renames(manifest).connector_keys
    for name, entry in sorted(reading["connectors"].items()):
        config = on_dr(name, entry, dr_bootstrap, overrides, names, keys)
        prepared.append((name, entry["type"], config, offsets_on_dr(entry, dr_ends, names),
                         exists_alike(dr_connect, name, config)))
    placed = [place_stopped(dr_connect, *one) for one in prepared]
    states = restore_states(dr_connect, {n: e["state"] for n, e in reading["connectors"].items()}, wait_s)
    return {"read_at": reading["read_at"], "safe_at": reading["safe_at"], "placed": placed, "states": states}
