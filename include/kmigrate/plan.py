"""Copy plans: the partition work units of a run, stored in its manifest, and the client configs
the Spark jobs read from a file with restricted permissions (secrets never travel in arguments)."""
from __future__ import annotations

import datetime
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig
from kmigrate.copier import PRESERVE, TRANSLATE, OffsetRun, WorkUnit
from kmigrate.errors import ConfigError, KmigrateError, TopicMismatch, TopicNotFound
from kmigrate.manifest import Manifest
from kmigrate.topics import prepare_target_topic, reconcile_target_topic

PLAN_PART = "plan"
COPY_RESULTS = "copy-results"
VERIFICATION = "verification"
CREATED_TOPICS = "created-topics"
TOPIC_CHANGES = "topic-changes"


def topic_partitions(admin: ClusterAdmin, topic: str) -> list[dict[str, int]]:
    """Each partition's log start and end offsets now."""
    out = []
    for partition in range(admin.require_partition_count(topic)):
        log_start, end = admin.watermarks(topic, partition)
        out.append({"partition": partition, "log_start": log_start, "end": end})
    return out


def plan_from_topics(topics: Mapping[str, Mapping[str, Any]], modes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One work unit per partition of `topics` ({topic: {"partitions": topic_partitions(...)}}), up
    to its end offset, largest first."""
    units = []
    for topic, entry in topics.items():
        mode = (modes or {}).get(topic, PRESERVE)
        if mode not in (PRESERVE, TRANSLATE):
            raise ConfigError(f"topic {topic!r}: mode {mode!r} is not 'preserve' or 'translate'")
        for p in entry["partitions"]:
            units.append({"topic": topic, "partition": p["partition"], "end_offset": p["end"], "mode": mode,
                          "offsets": p["end"] - p["log_start"]})
    units.sort(key=lambda u: (-u["offsets"], u["topic"], u["partition"]))
    return {"units": units}


def build_plan(source: ClusterConfig, topics: Iterable[str], modes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A plan for `topics` up to their current ends (without a snapshot: tests and benchmarks)."""
    with ClusterAdmin(source) as admin:
        return plan_from_topics({topic: {"partitions": topic_partitions(admin, topic)} for topic in topics}, modes)


def work_units(plan: dict[str, Any]) -> list[WorkUnit]:
    return [WorkUnit(u["topic"], u["partition"], u["end_offset"], u["mode"]) for u in plan["units"]]


def read_plan(manifest: Manifest, part: str = PLAN_PART) -> dict[str, Any]:
    plan = manifest.read(part)
    if plan is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no {part}; run the snapshot step first")
    return plan


def new_attempt() -> str:
    """A part-name suffix for one run of a job: sorts by time, unique across concurrent runs."""
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:6]}"


def latest_copy_rows(manifest: Manifest) -> dict[tuple[str, int], dict[str, Any]]:
    """The newest successful copy result row of each partition, over every copy attempt."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():
        if part.startswith(f"{COPY_RESULTS}/"):
            for row in manifest.read(part)["rows"]:
                if row.get("ok"):
                    latest[(row["topic"], row["partition"])] = row
    return latest


def offset_map_of(row: dict[str, Any] | None) -> list[OffsetRun]:
    return [OffsetRun(*run) for run in (row or {}).get("offset_map", [])]


def translate_maps(manifest: Manifest) -> dict[tuple[str, int], list[OffsetRun]]:
    """The offset map of each translate-mode partition, from its newest copy result (a resumed
    copy and the verification both need it; preserved partitions map to themselves)."""
    return {key: offset_map_of(row) for key, row in latest_copy_rows(manifest).items() if row["mode"] == TRANSLATE}


def preflight(source: ClusterConfig, target: ClusterConfig, units: list[WorkUnit], *,
              manifest: Manifest | None = None, timeout_s: float = 10.0) -> None:
    """Before any task starts: both clusters answer, every topic of the plan exists on the source
    with the planned partitions, and each target topic exists like the source's (created when
    absent, recorded in the run's manifest as created by it; refused when it conflicts; set for
    the copy where the copy will write). Fails fast with one clear error."""
    needed: dict[str, int] = {}
    for unit in units:
        needed[unit.topic] = max(needed.get(unit.topic, 0), unit.partition + 1)
    created = []
    with ClusterAdmin(source, timeout_s) as source_admin, ClusterAdmin(target, timeout_s) as target_admin:
        source_admin.check_reachable(timeout_s)
        target_admin.check_reachable(timeout_s)
        for topic, partitions in sorted(needed.items()):
            count = source_admin.partition_count(topic)
            if count is None:
                raise TopicNotFound(
                    f"topic {topic!r} of the plan does not exist on the source cluster "
                    f"({source.bootstrap_servers}); check the topic selection, or start a new run id so that a "
                    "new snapshot is taken")
            if count < partitions:
                raise TopicMismatch(
                    f"topic {topic!r} has {count} partitions on the source, the plan has {partitions}; the plan is "
                    "from another cluster or the topic was re-created: start a new run id")
            if manifest is not None:
                reconcile_topics(manifest, source_admin, target_admin, [topic])
            plan = prepare_target_topic(source_admin, target_admin, topic,
                                        writes=_writes_to(target_admin, topic, [u for u in units if u.topic == topic]))
            if plan.created:
                created.append(topic)
    if created and manifest is not None:
        manifest.write_once(f"{CREATED_TOPICS}/{new_attempt()}", {"topics": created})


def _writes_to(target_admin: ClusterAdmin, topic: str, units: Sequence[WorkUnit]) -> bool:
    """Whether copying `units` writes to the target topic: it is absent or short of a unit's end."""
    count = target_admin.partition_count(topic)
    if count is None or any(u.partition >= count for u in units):
        return True
    ends = target_admin.end_offsets((u.topic, u.partition) for u in units)
    return any(ends[(u.topic, u.partition)] < u.end_offset for u in units)


def created_topics(manifest: Manifest) -> set[str]:
    """The target topics this run created (recorded by the copy jobs' preflight)."""
    return {topic for part in manifest.parts() if part.startswith(f"{CREATED_TOPICS}/")
            for topic in manifest.read(part)["topics"]}


def reconcile_topics(manifest: Manifest, source_admin: ClusterAdmin, target_admin: ClusterAdmin,
                     topics: Iterable[str]) -> dict[str, Any]:
    """What each of `topics` gained on the source since its target topic was made (partitions,
    configs) is applied to the target topics this run created, and refused with TopicMismatch for
    the others (nothing changed then). What was applied is recorded (part topic-changes/<attempt>)
    and returned: {topic: {"partitions": [before, after] | None, "configs": {name: [old, new]}}}."""
    mine = created_topics(manifest)
    changes = {}
    for topic in topics:
        changed = reconcile_target_topic(source_admin, target_admin, topic, created_by_run=topic in mine)
        if changed["partitions"] or changed["configs"]:
            changes[topic] = changed
    if changes:
        manifest.write_once(f"{TOPIC_CHANGES}/{new_attempt()}", {"topics": changes})
    return changes


def topic_changes(manifest: Manifest) -> dict[str, Any]:
    """Every change `reconcile_topics` applied in this run, by topic, in order."""
    out: dict[str, Any] = {}
    for part in sorted(p for p in manifest.parts() if p.startswith(f"{TOPIC_CHANGES}/")):
        for topic, change in manifest.read(part)["topics"].items():
            entry = out.setdefault(topic, {"partitions": None, "configs": {}})
            if change["partitions"]:
                entry["partitions"] = [(entry["partitions"] or change["partitions"])[0], change["partitions"][1]]
            entry["configs"].update(change["configs"])
    return out


def copy_progress(target: ClusterConfig, units: Sequence[WorkUnit]) -> Callable[[], str]:
    """A status line for the copy job's driver: how many partitions the target holds up to their
    snapshot end, and how many offsets are still to go (read from the target, so it counts every
    task, retried ones too)."""
    def line() -> str:
        try:
            with ClusterAdmin(target, timeout_s=5) as admin:
                ends = admin.end_offsets((u.topic, u.partition) for u in units)
        except KmigrateError as exc:
            return f"the target's end offsets are not available ({exc})"
        to_go = [max(0, u.end_offset - ends[(u.topic, u.partition)]) for u in units]
        return (f"{sum(1 for n in to_go if n == 0)}/{len(units)} partitions at their snapshot end on the target, "
                f"{sum(to_go):,} offsets to go")
    return line


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
    return _parse_clients(file.read_text(), f"client config file {file}")


def _parse_clients(text: str, where: str) -> tuple[ClusterConfig, ClusterConfig]:
    try:
        data = json.loads(text)
        return ClusterConfig("source", data["source"]), ClusterConfig("target", data["target"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{where} must be JSON with 'source' and 'target' objects ({exc})") from exc


CLIENTS_ENV = "KMIGRATE_CLIENTS_JSON"


def clients_json(source: ClusterConfig, target: ClusterConfig) -> str:
    return json.dumps({"source": dict(source.settings), "target": dict(target.settings)})


def load_clients_from(path: str | os.PathLike[str] | None) -> tuple[ClusterConfig, ClusterConfig]:
    """From the file `path`, or else from the environment variable KMIGRATE_CLIENTS_JSON (how the
    Airflow operator hands them to spark-submit: never on a command line)."""
    if path:
        return load_clients(path)
    text = os.environ.get(CLIENTS_ENV)
    if not text:
        raise ConfigError(f"no client configs: pass --clients FILE (mode 600) or set {CLIENTS_ENV}")
    return _parse_clients(text, CLIENTS_ENV)


def write_clients(path: str | os.PathLike[str], source: ClusterConfig, target: ClusterConfig) -> Path:
    """Write the client config file with owner-only permissions."""
    file = Path(path)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(clients_json(source, target))
    os.chmod(file, 0o600)
    return file
