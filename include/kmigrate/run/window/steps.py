"""The cutover window's steps (docs/DESIGN.md §3.2), each a function of the run it works on (`Run`:
its typed request, manifest, clusters, Connect clients and selection, as the caller resolves them)
and of what the caller does around a step (`Window`: which errors fail it for good, the window's
copy). `run_window` runs them back to back in the course's order (kmigrate.run.cutover.course);
the DAGs' step tasks run one each (a DR drill's snapshot and groups, its topic configs). Each is
idempotent: a step of a run that has resumed on the target already skips (`skipped`), and each
times itself in the run's timeline."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, GroupActive, SourceMoved, TransactionOpen
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.checks.selection import Selection, selected_topics
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate.run.cutover import course, window
from kmigrate.run.records import events
from kmigrate.run.cutover.groups import replicate_groups
from kmigrate.run.cutover.quiesce import quiesce_began, quiesce_poke
from kmigrate.run.cutover.snapshot import check_source_at_snapshot, read_snapshot, take_snapshot
from kmigrate.run.records import timeline
from kmigrate.run.targets import acls
from kmigrate.run.targets import prepare as targets

log = logging.getLogger(__name__)

# how long the quiesce waits for the source to stand still before the step fails (and is retried)
QUIESCE_BUDGET_S = 3600.0


class Run(Protocol):
    """The run a step works on: its request, and what the caller resolves from it (the clusters
    and Connect clients from their connections, once)."""

    request: RunRequest
    name: str

    @property
    def manifest(self) -> Manifest: ...

    @property
    def source(self) -> ClusterConfig: ...

    @property
    def target(self) -> ClusterConfig: ...

    @property
    def source_connect(self) -> ConnectClient | None: ...

    @property
    def target_connect(self) -> ConnectClient | None: ...

    @property
    def selection(self) -> Selection: ...


def _as_they_are(*errors: type[Exception]) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


@dataclasses.dataclass
class Window:
    """A step's run and what its caller does around it: `final(*errors)`, the context in which those
    errors fail the step for good (a retry cannot help: a consumer still running, a source written
    to after the snapshot); the window's copy and verification (`copy_and_verify`, a Spark job the
    caller launches). The stop hands the quiesce its check and the selected topics."""

    run: Run
    final: Callable[..., AbstractContextManager[None]] = _as_they_are
    copy_and_verify: Callable[[], Any] | None = None
    stopped: Callable[[], bool] | None = None
    topics: list[str] | None = None


def skipped(run: Run, left: str) -> bool:
    """Whether the run has resumed on the target already (`events.finished`): then the step skips,
    and its log says so and what it leaves (`left`, like "its connectors there are left as they
    are")."""
    if not events.finished(run.manifest):
        return False
    log.info("the run resumed on the target already: %s", left)
    return True


def stop_connectors(w: Window) -> None:
    """Target topics the run did not create are checked against the source first (nothing is
    stopped when one conflicts); then each connector's state is recorded and it is asked to stop
    (`window.begin_stop`). The quiesce begins at once, while they stop, and passes no earlier than
    their stop (`w.stopped`); the selected topics and the client it samples with are ready before
    the window opens."""
    run = w.run
    if skipped(run, "the source connectors are left as they are"):
        return
    w.topics = topics = selected_topics(run.source, run.selection)
    if not run.manifest.exists(Part.SNAPSHOT):
        targets.check_target_topics(run.manifest, run.source, run.target, topics,
                                    run.request.renames_for(topics).check_topics(topics))
    with shared_admin(run.source) as admin:  # the quiesce's client (kept in this process's pool)
        admin.check_reachable()
    names = run.selection.connectors
    w.stopped = window.begin_stop(run.manifest, run.source_connect, names, quiesce_s=run.request.quiesce_seconds)
    if run.source_connect is not None and names:
        log.info("asking the source Connect cluster to stop %s", ", ".join(names))


def quiesce(w: Window) -> None:
    """Source end offsets unchanged for quiesce_seconds (producers outside Connect are stopped by
    their owners) with no transaction left open on them, no selected consumer group with members
    (those whose offsets stand still are waited for up to member_session_timeout_s), and the
    connectors stopped with no task left. A transaction still open or a group still consuming fails
    the step for good, naming it (its producer or consumers must be stopped first)."""
    run, request = w.run, w.run.request
    if skipped(run, "its source may be in use again, so it is not sampled"):
        return
    began = time.time()
    names = run.selection.connectors
    stopped = w.stopped or window.stopping(run.manifest, run.source_connect, names)  # a retry's: asked before
    stop_began = run.manifest.read(Part.event(events.STOPPED))["at"]

    def connectors_stopped() -> bool:
        if not stopped():
            return False
        if names and run.source_connect is not None:
            timeline.record(run.manifest, "stop_connectors", _epoch(stop_began))
            log.info("stopped on the source Connect cluster: %s", ", ".join(names))
        return True

    topics = w.topics if w.topics is not None else selected_topics(run.source, run.selection)
    with w.final(GroupActive, TransactionOpen):
        quiet = quiesce_poke(run.manifest, run.source, topics, request.quiesce_seconds, run.selection.groups,
                             budget_s=QUIESCE_BUDGET_S, ready=connectors_stopped,
                             member_timeout_s=request.member_session_timeout_s)
    if not quiet:
        raise RuntimeError(f"the source's end offsets did not stand still for {request.quiesce_seconds}s within "
                           f"{QUIESCE_BUDGET_S:.0f}s: a producer outside Connect still writes to the selected topics; "
                           "stop it (the retry quiesces again) or run the rollback DAG")
    timeline.record(run.manifest, "quiesce", quiesce_began(run.manifest, began))


def snapshot(w: Window, drill: bool = False) -> dict[str, int]:
    """The run's snapshot; in a migration, what the source changed since the pre-copy is then
    applied to the target topics the run created (a DR drill's source stays live: it does not)."""
    run = w.run
    selection = run.selection
    with timeline.timed(run.manifest, "snapshot"):
        taken = take_snapshot(run.manifest, run.source, topics_include=selection.topics_include,
                              topics_exclude=selection.topics_exclude or None, groups=selection.groups or None,
                              source_connect=run.source_connect, connectors=list(selection.connectors) or None,
                              modes=selection.modes, live=drill, renames=run.request.renames,
                              mirrored=bool(run.request.mirror_selection))
        if not drill:
            names = run.request.renames.topic_names(taken["topics"])
            for topic, change in targets.reconcile_target_topics(run.manifest, run.source, run.target, names).items():
                log.info("target topic %s changed like the source since the pre-copy: %s", topic, change)
    counts = {"topics": len(taken["topics"]), "groups": len(taken["groups"]), "connectors": len(taken["connectors"])}
    log.info("snapshot (taken at %s) in %s: %s", taken["taken_at"], run.manifest.location, counts)
    return counts


def restore_topic_configs(w: Window) -> dict[str, Any]:
    """The target topics' configs that the copy set (timestamps kept as CreateTime, no bound on old
    or future timestamps) back to the source's values, before anything else writes to them."""
    run = w.run
    if skipped(run, "its topics' configs there are left as they are"):
        return {"topics": {}}
    if run.request.mirror_run:  # the mirror keeps them as the source's
        return {"topics": {}}
    with timeline.timed(run.manifest, "restore_topic_configs"):
        names = run.request.renames.topic_names(read_snapshot(run.manifest)["topics"])
        restored = targets.restore_topic_configs(run.manifest, run.source, run.target, names)
    for topic, configs in restored["topics"].items():
        log.info("%s: %s", topic, ", ".join(f"{k} {old} -> {new}" for k, (old, new) in configs.items()))
    return restored


def migrate_acls(w: Window) -> dict[str, Any]:
    """The applications' ACLs on the snapshot's topics and groups created on the target
    (`acls.migrate_acls`), before the connectors resume; the principals missing there named."""
    run = w.run
    if skipped(run, "its ACLs there are left as they are"):
        return {}
    with timeline.timed(run.manifest, "migrate_acls"):
        result = acls.migrate_acls(run.manifest, run.source, run.target, run.selection.acls, run.request.renames)
    if result.get("expected"):
        log.info("ACLs: %d expected on the target, %d created, %d there already; %d there now", len(result["expected"]),
                 len(result["created"]), len(result["present"]), result["on_target"])
    for row in result.get("conflicting", []):
        log.warning("the target has a conflicting ACL, left as it is: %s", acls.Acl.from_row(row).text())
    for row in result.get("principals_missing", []):
        log.warning("%s: %s", row["principal"], row["do"])
    return result


def replicate_consumer_groups(w: Window, drill: bool = False) -> int:
    """Each snapshot group's offsets and metadata on the target. A migration first checks that each
    group is still stopped on the source with the snapshot's offsets; a DR drill copies them as of
    its snapshot. A migration that has resumed on the target leaves its groups alone."""
    run = w.run
    if not drill and skipped(run, "its consumer groups are left as they are there"):
        return 0
    if run.request.mirror_run:  # the mirror copies them; the drill's cut checked them on the DR cluster
        return len(read_snapshot(run.manifest)["groups"])
    with timeline.timed(run.manifest, "replicate_groups"):
        results = replicate_groups(run.manifest, run.target, None if drill else run.source, run.request.renames)
    for group in results:
        log.info("group %s: %d offsets, %d written", group["group"], len(group["offsets"]), group["written"])
    return len(results)


def migrate_connectors(w: Window) -> list[str]:
    """Each snapshot connector created on the target Connect cluster, stopped, with its config (and
    the run's overrides) and its offsets; resuming it is the next step. Nothing when the run selects
    no connector."""
    run = w.run
    if run.target_connect is None or skipped(run, "its connectors there are left as they are"):
        return []
    with timeline.timed(run.manifest, "migrate_connectors"):
        results = connector_steps.migrate_connectors(run.manifest, run.target_connect,
                                                     target_bootstrap=run.target.bootstrap_servers,
                                                     overrides=run.request.connector_overrides,
                                                     source_connect=run.source_connect, renames=run.request.renames)
    for c in results:
        log.info("connector %s (%s): %s on the target, offsets written: %s", c["name"], c["type"], c["state"],
                 c["offsets_written"])
    return [c["name"] for c in results]


def resume_connectors(w: Window) -> list[dict[str, Any]]:
    """Each connector on the target in the state it had on the source before the run (RUNNING,
    PAUSED or STOPPED), once the consumer groups are confirmed still stopped on the source."""
    run = w.run
    if skipped(run, "its connectors there are left as they are"):
        return window.resumed(run.manifest)
    with timeline.timed(run.manifest, "resume_connectors"):
        # written to after the snapshot: resuming would leave records behind (a cluster that does
        # not answer is retried)
        with w.final(SourceMoved, ConfigError):
            check_source_at_snapshot(run.manifest, run.source)
        resumed = window.resume_on_target(run.manifest, run.source, run.target_connect)
    log.info("resumed on the target Connect cluster: %s", resumed)
    return resumed


def run_window(w: Window, say: Callable[[str], None], stop_mirror: Callable[[], Any] | None = None) -> list[str]:
    """The window's course for `w`'s run (`course.window_course`, run by `course.run_course`): its
    steps back to back, each marked done as it ends, a retry continuing at the first step not done;
    with `stop_mirror` (a planned failover's) after the snapshot. Returns the names of the steps
    this call ran."""
    calls = {"stop_connectors": stop_connectors, "quiesce": quiesce, "snapshot": snapshot,
             "copy_and_verify": lambda w: w.copy_and_verify(), "restore_topic_configs": restore_topic_configs,
             "migrate_acls": migrate_acls, "replicate_groups": replicate_consumer_groups,
             "migrate_connectors": migrate_connectors, "resume_connectors": resume_connectors}
    return course.run_course(w.run.manifest, course.window_course(
        {name: functools.partial(step, w) for name, step in calls.items()}, stop_mirror), say)


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at).timestamp()
