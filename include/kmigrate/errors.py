"""The project's exceptions: each message names the thing that failed and the way out."""
from __future__ import annotations


class KmigrateError(Exception):
    """Base of every error this library raises on purpose."""


class ConfigError(KmigrateError):
    """A client or run setting is missing or invalid."""


class ConnectError(KmigrateError):
    """A Kafka Connect REST call failed."""

    def __init__(self, message: str, *, status: int | None = None, connector: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.connector = connector


class ConnectUnreachable(ConnectError):
    """The Connect REST endpoint did not answer."""


class ConnectorNotFound(ConnectError):
    """404: the connector does not exist on that Connect cluster."""


class ConnectorStateError(ConnectError):
    """400/409: the connector is not in a state that allows the call, or it already exists."""


class ConnectTimeout(ConnectError):
    """A wait on the Connect cluster (rebalance, stop, start) ran past its deadline."""


class ClusterUnavailable(KmigrateError):
    """A Kafka cluster did not answer in time, or refused the client."""


class TopicNotFound(KmigrateError):
    """The topic does not exist on that cluster."""


class CopyError(KmigrateError):
    """Copying one partition failed; the message names topic and partition."""

    def __init__(self, message: str, *, topic: str, partition: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition


class CopyInterrupted(CopyError):
    """The copy of a partition was cut off by something that passes: a leader moved, a broker went
    away, too few in-sync replicas for a while. The copy resumes from the target's end."""


class OffsetMismatch(CopyError):
    """A record landed on the target at another offset than its source offset (a racing writer,
    or target data this copier did not write)."""

    def __init__(self, topic: str, partition: int, expected: int, actual: int) -> None:
        if actual < expected:
            cause = (f"{expected - actual} records written before it did not land: the target refused them (a "
                     "batch over the topic's max.message.bytes, or another broker error: see the target broker "
                     "log). Fix the cause, then re-run the copy (it resumes from the target's end)")
        else:
            cause = ("another writer is producing to the target partition, or the target holds data this migration "
                     "did not write. Stop other writers to the target topic, then re-run the copy (it resumes from "
                     "the target's end)")
        super().__init__(f"{topic}[{partition}]: record expected at target offset {expected} landed at {actual}; "
                         + cause, topic=topic, partition=partition)
        self.expected = expected
        self.actual = actual


class ForeignTarget(CopyError):
    """The target partition holds data that is not a prefix of this source partition."""


class TargetDiverged(CopyError):
    """The target partition's last records differ from the source's at the same offsets; `window`,
    the offsets compared (when known)."""

    def __init__(self, message: str, *, topic: str, partition: int, window: tuple[int, int] | None = None) -> None:
        super().__init__(message, topic=topic, partition=partition)
        self.window = window


class RepeatedMarker(CopyError):
    """The target's transaction coordinator wrote a marker a second time, at an offset the source
    holds other data at (`copy/repeats.py`)."""

    def __init__(self, topic: str, partition: int, marker: int, repeat: int) -> None:
        super().__init__(
            f"{topic}[{partition}]: the target holds the transaction marker at offset {marker} a second time, at "
            f"offset {repeat}, where the source holds other data: the target's transaction coordinator sent that "
            "marker again after a broker failure (it had not got the answer) and the broker appended it anew. A "
            f"log's end cannot be cut, so this target partition cannot hold the source's offsets from {repeat} on; "
            "the source is untouched. Delete the topic on the target, then run the copy again (the topic is created "
            "again and copied from the source's log start)", topic=topic, partition=partition)
        self.marker = marker
        self.repeat = repeat


class SourceNotReady(CopyError):
    """The source partition cannot be read up to the requested end (open transaction, truncation)."""


class TopicMismatch(KmigrateError):
    """The target topic exists with a shape or configs that conflict with the source topic."""


class GroupError(KmigrateError):
    """A consumer group cannot be read, checked or written; the message names the group."""

    def __init__(self, message: str, *, group: str) -> None:
        super().__init__(message)
        self.group = group


class GroupActive(GroupError):
    """The group has members: on the target its offsets cannot (and must not) be changed; on the source
    (a migration) its offsets are not final."""


class TransactionOpen(KmigrateError):
    """A transaction on the source stayed open through the quiesce: what it holds is not decided, so
    the snapshot cannot be taken."""


class OffsetsNotApplied(KmigrateError):
    """Offsets read back after a write differ from what was written."""


class RunConflict(KmigrateError):
    """A run name reused with other params: one run, one request."""


class SourceMoved(KmigrateError):
    """Records were written to the source after the snapshot: resuming on the target would leave them behind."""


class MissingAcls(ConfigError):
    """The migration's principal lacks rights it needs on a cluster; every missing one is named."""

    @classmethod
    def transactional_id(cls, transactional_id: str, topic: str, partition: int) -> MissingAcls:
        """The target refused the copier's transactional id for `topic[partition]`."""
        return cls(f"the migration's principal may not use the transactional id {transactional_id!r} on the target, "
                   f"which copies the transactions of {topic}[{partition}]: grant Write and Describe on transactional "
                   "ids prefixed 'kmigrate-' (README, Secured clusters) and retry the step")


class TopicsHeld(KmigrateError):
    """Another run holds some of the run's topics on the target; the message names it and the way out."""

    def __init__(self, message: str, *, holders: list[str]) -> None:
        super().__init__(message)
        self.holders = holders


class PartitionHeld(CopyError):
    """Another copier holds the lease on the target partition and did not release it in time."""


class MirrorStillRunning(KmigrateError):
    """A DR mirror still beats after a failover asked it to stop."""


class WrongCluster(ConfigError):
    """A connection reaches another cluster than the one a run, a mirror or a failover began on (or
    than the one a destructive step must act on); the message names both cluster ids and the way out."""


class ProducersActive(KmigrateError):
    """A topic's end still moves on the source (its producers write there): its promotion onto the DR
    cluster waits for them to stop."""
