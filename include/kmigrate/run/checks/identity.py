"""Which clusters a run touches (docs/DESIGN.md §13): the ids of its two Kafka clusters and of the
Kafka clusters behind its Connect workers, recorded in the run's manifest when it begins and compared
before each step that deletes, promotes, stops or writes, so that a connection pointed at another
cluster is refused by name, never acted on. A connection is only an address; an operator at 3 a.m.
types the wrong one, or forgets to swap two of them, and only the cluster's own id tells.

- `observe` reads what the connections reach now: each Kafka cluster's id (DescribeCluster) and each
  Connect cluster's `kafka_cluster_id` (its `GET /`), and refuses two sides that are one cluster.
- `record` keeps the first observation of a run (the part IDENTITY) and refuses a later one whose
  clusters differ; a side seen for the first time (a Connect cluster a later step needs) is added.
- `check_failback` holds a failback's clusters against the failover it reverses: its source must be
  that run's DR cluster, its target that run's source.
- `check_same_source` holds an unplanned failover's source, which cannot be asked its id, against
  the addresses the mirror read.
- `check_direction` refuses a new run whose source once received a migration or a mirror from its
  target (their claims logs say so: `kmigrate.claims.log.received_from`): source and target swapped.
  A failback reverses a recorded failover on purpose and is held to `check_failback` instead."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kmigrate.claims.log import CLAIMS_TOPIC, received_from
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError, WrongCluster
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.secrets import redact_url

log = logging.getLogger(__name__)

IDENTITY = "identity"
SIDES = ("source", "target", "source_connect", "target_connect")


def addresses(bootstrap_servers: str) -> list[str]:
    """A bootstrap list as a sorted list of lower-case host:port, for comparison."""
    return sorted({a.strip().lower() for a in bootstrap_servers.split(",") if a.strip()})


def kafka_side(cluster: ClusterConfig) -> dict[str, Any]:
    with ClusterAdmin(cluster, timeout_s=10) as admin:
        return {"bootstrap": addresses(cluster.bootstrap_servers), "cluster_id": admin.cluster_id()}


def connect_side(client: ConnectClient) -> dict[str, Any]:
    # the URL as messages may show it and the manifest may keep it: no credentials in it
    return {"url": redact_url(client.url), "kafka_cluster_id": str(client.version().get("kafka_cluster_id") or "")}


def observe(source: ClusterConfig, target: ClusterConfig, source_connect: ConnectClient | None = None,
            target_connect: ConnectClient | None = None) -> dict[str, Any]:
    """The ids the connections reach now; WrongCluster when the two Kafka sides, or the two Connect
    sides, are one cluster."""
    if addresses(source.bootstrap_servers) == addresses(target.bootstrap_servers):
        raise WrongCluster(f"source and target are the same cluster ({source.bootstrap_servers}); pick another target")
    seen: dict[str, Any] = {"source": kafka_side(source), "target": kafka_side(target)}
    if seen["source"]["cluster_id"] == seen["target"]["cluster_id"]:
        raise WrongCluster(f"source ({source.bootstrap_servers}) and target ({target.bootstrap_servers}) are the same "
                           f"cluster (id {seen['source']['cluster_id']}); pick another target")
    for side, client in (("source_connect", source_connect), ("target_connect", target_connect)):
        if client is not None:
            seen[side] = connect_side(client)
    if "source_connect" in seen and "target_connect" in seen:
        check_connect_apart(seen["source_connect"], seen["target_connect"])
    return seen


def check_connect_apart(source: Mapping[str, Any], target: Mapping[str, Any]) -> None:
    """Two Connect sides of one run are two Connect clusters: not one URL, and not the workers of one
    Kafka cluster (each keeps its connectors' configs, offsets and status in the Kafka cluster its id
    names: the source's connectors would be stopped, given offsets and resumed in place)."""
    if source["url"].rstrip("/") == target["url"].rstrip("/") or (
            source["kafka_cluster_id"] and source["kafka_cluster_id"] == target["kafka_cluster_id"]):
        raise WrongCluster(
            f"the source Connect cluster ({source['url']}, Kafka cluster {source['kafka_cluster_id']}) and the target "
            f"Connect cluster ({target['url']}, Kafka cluster {target['kafka_cluster_id']}) are one Connect cluster: "
            "the run would stop the source's connectors, then give the same connectors translated offsets and resume "
            "them there. Point the target Connect connection at the workers of the target cluster")


def check_direction(source: ClusterConfig, target: ClusterConfig, seen: Mapping[str, Any]) -> None:
    """A new run's target must not be a cluster its source received a run from (the source's claims
    log names the target's id), unless the target received one from the source as well: a failover
    and a failback went between the two, and the direction cannot be told from history. WrongCluster
    naming both ids, the run that went the other way, and the way out. Reads both claims logs, writes
    nothing (an absent claims topic is not created)."""
    source_id, target_id = seen["source"]["cluster_id"], seen["target"]["cluster_id"]
    try:
        came = received_from(source).get(target_id)
        if came is None or source_id in received_from(target):
            return
    except KmigrateError as exc:  # a principal that may not read a claims log (a read-only one on a source)
        log.warning("the claims logs could not be read (%s): whether source and target are swapped is not checked "
                    "(grant Describe and Read on the topic %s to check it)", exc, CLAIMS_TOPIC)
        return
    raise WrongCluster(
        f"source and target look swapped: the source cluster {source_id} (at {source.bootstrap_servers}) received run "
        f"{came.get('run')!r} from cluster {target_id}, this run's target (at {target.bootstrap_servers}), and never "
        "the other way. Refused before anything is written: swap the source and target connections back. A failback "
        "after a failover goes this way on purpose: start it as one (kafka_dr_mirror with failback_of)")


def check_begun(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, seen: Mapping[str, Any], *,
                reversing: bool = False, what: str = "run") -> None:
    """Read only (a preflight): `seen` held to what the run recorded; a run that recorded nothing yet
    is checked for a swapped source and target (`check_direction`), unless it reverses a failover on
    purpose (`reversing`: a failback, held to `check_failback` instead)."""
    recorded = manifest.read(IDENTITY)
    if recorded is not None:
        check_recorded(manifest.run_id, recorded, seen, what=what)
    elif not reversing:
        check_direction(source, target, seen)


def begin(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, *, what: str = "run",
          seen: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's clusters at a step that may be its first to write: `seen` (or observed now) checked
    (`check_begun`), then recorded."""
    seen = dict(seen) if seen is not None else observe(source, target)
    check_begun(manifest, source, target, seen, what=what)
    return record(manifest, seen, what=what)


def record(manifest: Manifest, seen: Mapping[str, Any], *, what: str = "run") -> dict[str, Any]:
    """The run's identity: `seen` the first time; later, each side seen before must be the same
    cluster (WrongCluster naming both ids and the way out), and a side seen for the first time is
    added. Returns what is recorded."""
    stored = manifest.read(IDENTITY)
    if stored is None:
        return manifest.get_or_create(IDENTITY, lambda: dict(seen))
    check_recorded(manifest.run_id, stored, seen, what=what)
    new = {side: seen[side] for side in SIDES if side in seen and side not in stored}
    if new:
        stored = {**stored, **new}
        manifest.replace(IDENTITY, stored)
    return stored


def check_recorded(run: str, recorded: Mapping[str, Any], seen: Mapping[str, Any], *, what: str = "run") -> None:
    """Each side in both `recorded` (when the run began) and `seen` (now) is one cluster."""
    for side in SIDES:
        if side not in recorded or side not in seen:
            continue
        key = "kafka_cluster_id" if side.endswith("_connect") else "cluster_id"
        was, now = recorded[side].get(key), seen[side].get(key)
        if was and now and was != now:
            where = recorded[side].get("url") or ",".join(recorded[side].get("bootstrap", []))
            here = seen[side].get("url") or ",".join(seen[side].get("bootstrap", []))
            label = side.replace("_connect", " Connect")
            raise WrongCluster(
                f"the {label} connection of {what} {run} reaches Kafka cluster {now} (at {here}), but the {what} began "
                f"on cluster {was} (at {where}): refused before anything is changed. Point the {label} connection back "
                f"at cluster {was}, or start a new run name for cluster {now}")


def check_connect(manifest: Manifest, side: str, client: ConnectClient, *, what: str = "run") -> None:
    """A step that stops, resumes or creates connectors on one Connect side of a recorded run (a
    rollback): `client` must reach the workers the run recorded for `side` ("source_connect" or
    "target_connect"), compared by their Kafka cluster's id (WrongCluster otherwise). A run that
    recorded no Connect side (no connectors, or begun before ids were recorded) is not checked."""
    recorded = manifest.read(IDENTITY) or {}
    if side in recorded:
        check_recorded(manifest.run_id, recorded, {side: connect_side(client)}, what=what)


def check_failback(failed_over: Manifest, back: Mapping[str, Any]) -> None:
    """A failback (a mirror `back` from the DR cluster to the original) reverses the failover of
    `failed_over`: its source must be that run's target (the DR cluster) and its target that run's
    source (the original), and the Connect cluster it stops the moved connectors on must be the
    original's, never the DR cluster's. WrongCluster otherwise, naming both ids and the way out;
    ConfigError when the failed-over run recorded no ids (it began before they were recorded)."""
    recorded = failed_over.read(IDENTITY)
    if recorded is None:
        raise ConfigError(
            f"run {failed_over.run_id} recorded no cluster ids (it began before runs recorded them), so this failback "
            "cannot prove which cluster it would delete topics or stop connectors on. Mirror back without failback_of "
            "(nothing is deleted or stopped), after checking the connections by hand")
    original, dr = recorded["source"], recorded["target"]
    for side, want, role in (("source", dr, "the DR cluster the failover promoted"),
                             ("target", original, "the original cluster the failover left")):
        if back[side]["cluster_id"] != want["cluster_id"]:
            raise WrongCluster(
                f"a failback of run {failed_over.run_id} reads from the DR cluster and writes to the original: its "
                f"{side} must be {role}, cluster {want['cluster_id']} (at {','.join(want['bootstrap'])}), but the "
                f"{side} connection reaches cluster {back[side]['cluster_id']} (at "
                f"{','.join(back[side]['bootstrap'])}). Refused before anything is stopped or deleted: swap the "
                "source and target connections (source: the DR cluster, target: the original)")
    connect = back.get("target_connect")
    if connect is None:
        return
    if connect["kafka_cluster_id"] == dr["cluster_id"] or (
            "source_connect" in recorded and connect["kafka_cluster_id"] != recorded["source_connect"]["kafka_cluster_id"]):
        raise WrongCluster(
            f"a failback of run {failed_over.run_id} stops the moved connectors on the original's Connect cluster, but "
            f"the target Connect connection ({connect['url']}) reaches the workers of Kafka cluster "
            f"{connect['kafka_cluster_id']}"
            + (f", the DR cluster: the connectors the failover started there would be stopped" if
               connect["kafka_cluster_id"] == dr["cluster_id"] else
               f", not the original's Connect cluster (Kafka cluster {recorded['source_connect']['kafka_cluster_id']})")
            + ". Refused before anything is stopped: point the target Connect connection at the original's workers")


def check_same_source(manifest: Manifest, source: ClusterConfig) -> None:
    """An unplanned failover's source (silent: it cannot be asked its id) must be the one the run's
    mirror reads: the same bootstrap addresses as recorded when the mirror began. A mistyped address
    does not answer either, and must not pass for the source gone."""
    recorded = manifest.read(IDENTITY)
    if recorded is None:
        return  # a mirror started before ids were recorded: the source's silence is all there is to check
    want, given = recorded["source"]["bootstrap"], addresses(source.bootstrap_servers)
    if not set(given) & set(want):
        raise WrongCluster(
            f"the source connection ({','.join(given)}) is not the source the mirror of run {manifest.run_id} reads "
            f"(cluster {recorded['source']['cluster_id']} at {','.join(want)}): that it does not answer says nothing "
            "of the real source. Refused: point the source connection at the addresses the mirror reads")
