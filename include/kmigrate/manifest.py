"""The run manifest (docs/DESIGN.md §6): one folder per migration run at a state location (a local path or
any fsspec URL), holding JSON parts that are each written once, atomically, and read back by
re-runs."""
from __future__ import annotations

import datetime
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from kmigrate.errors import KmigrateError

_PART_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")


class Part:
    """The names of a run manifest's parts (docs/DESIGN.md §6). A repeatable step writes
    `attempt(KIND)` (KIND/<attempt>, newest last when sorted); the others are written once."""

    SNAPSHOT = "snapshot"                        # topics, groups and connectors at the cut-over
    PLAN = "plan"                                # the copy's work units, from the snapshot
    PRE_COPY_PLAN = "pre-copy-plan"              # the pre-copy's work units, while the source is live
    QUIESCE = "quiesce"                          # quiesce/<n>: the quiesce sensor's samples
    EVENTS = "events"                            # events/<event>: when it first happened
    CONNECTOR_STATES = "connector-states"        # each connector's state before the run stopped it
    CREATED_TOPICS = "created-topics"            # attempts: target topics the run created
    TOPIC_CHANGES = "topic-changes"              # attempts: source changes applied to those topics
    COPY_RESULTS = "copy-results"                # attempts: a copy job's result rows
    VERIFICATION = "verification"                # attempts: a verify job's table
    TOPIC_CONFIGS = "topic-configs"              # attempts: the copy's topic settings restored
    CONFIG_VERSIONS = "config-versions"          # attempts: source configs the target's Kafka removed, mapped
    GROUP_RESULTS = "group-replication"          # attempts: groups written on the target
    CONNECTOR_RESULTS = "connector-migration"    # attempts: connectors created on the target
    RESUMED = "resumed-connectors"               # connectors in their source state on the target
    DRILL = "drill"                              # a DR drill's RPO and RTO
    PARAMS = "params"                            # what the run was asked to do, from its first trigger
    TIMELINE = "timeline"                        # timeline/<step>/<attempt>: when a step began and ended
    PRE_COPY_ROUNDS = "pre-copy-rounds"          # attempts: one pre-copy round each
    LIVE_VERIFICATION = "live-verification"      # attempts: the pre-copied ranges verified while live

    @staticmethod
    def attempt(kind: str) -> str:
        """A new part name of `kind` for one run of a repeatable step."""
        return f"{kind}/{new_attempt()}"

    @staticmethod
    def event(name: str) -> str:
        return f"{Part.EVENTS}/{name}"


def new_attempt() -> str:
    """A part-name suffix for one run of a job: sorts by time, unique across concurrent runs."""
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:6]}"


class ManifestError(KmigrateError):
    """The state location cannot be read or written."""


class ManifestConflict(KmigrateError):
    """A part exists with other content; it is never overwritten."""


def _encode(data: Mapping[str, Any]) -> bytes:
    # compact: the C encoder (an indented part of thousands of rows took 0.15 s to encode, this 0.02 s);
    # `python -m json.tool` shows a part indented
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


class Manifest:
    """`<state_location>/<run_id>/<part>.json`, each part written once.

    Writes go to a temporary name and are then renamed into place, so a reader sees a whole part
    or none. A part that exists is never replaced: writing the same content again is a no-op
    (re-runs are idempotent); other content raises ManifestConflict and leaves the part as it was.
    """

    def __init__(self, state_location: str, run_id: str, storage_options: Mapping[str, Any] | None = None) -> None:
        if not _RUN_ID.fullmatch(run_id):
            raise ManifestError(f"run id {run_id!r} is not usable as a folder name; use letters, digits and ._:+-")
        self.location = f"{str(state_location).rstrip('/')}/{run_id}"
        self.run_id = run_id
        try:
            self._fs, self._root = fsspec.core.url_to_fs(self.location, **dict(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise ManifestError(
                f"state location {state_location!r} cannot be opened ({exc}); use a local path or an fsspec URL "
                "whose filesystem package is installed") from exc

    def __repr__(self) -> str:
        return f"Manifest({self.location!r})"

    def _path(self, part: str) -> str:
        if not _PART_NAME.fullmatch(part):
            raise ManifestError(f"manifest part name {part!r} is invalid; use letters, digits, ._- and / between names")
        return f"{self._root}/{part}.json"

    def _fail(self, action: str, part: str, exc: Exception) -> ManifestError:
        return ManifestError(
            f"{action} part {part!r} of the run manifest at {self.location} failed ({type(exc).__name__}: {exc}); "
            "check that the state location exists, is writable and is reachable")

    def exists(self, part: str) -> bool:
        try:
            return bool(self._fs.exists(self._path(part)))
        except OSError as exc:
            raise self._fail("looking up", part, exc) from exc

    def read(self, part: str) -> dict[str, Any] | None:
        """The part's content, or None when it was never written."""
        path = self._path(part)
        try:
            with self._fs.open(path, "rb") as handle:
                return json.loads(handle.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("reading", part, exc) from exc

    def write_once(self, part: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Write the part unless it exists. The same content again is a no-op; other content raises
        ManifestConflict. Returns what is stored."""
        encoded = _encode(data)
        stored = self.read(part)
        if stored is None:
            self._put(part, encoded)
            stored = self.read(part)  # a concurrent writer may have won the rename
        if _encode(stored) != encoded:
            raise ManifestConflict(
                f"part {part!r} of the run manifest at {self.location} already holds other content; it is never "
                f"overwritten. Start a new run id, or delete {self.location}/{part}.json if it is known to be wrong")
        return stored

    def get_or_create(self, part: str, compute: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """The stored part; computed and written only when absent (a snapshot is taken once per run)."""
        stored = self.read(part)
        if stored is not None:
            return stored
        self._put(part, _encode(compute()))
        return self.read(part)  # whichever writer's rename landed

    def parts(self) -> list[str]:
        """Names of the stored parts, sorted."""
        try:
            files = self._fs.find(self._root) if self._fs.exists(self._root) else []
        except OSError as exc:
            raise self._fail("listing", "*", exc) from exc
        prefix = self._root.rstrip("/") + "/"
        return sorted(f[len(prefix):-len(".json")] for f in files if f.endswith(".json") and ".tmp-" not in f)

    def put_file(self, name: str, data: bytes) -> str:
        """A derived file next to the parts (the report), replaced atomically on every write;
        returns its path or URL."""
        if not _PART_NAME.fullmatch(name):
            raise ManifestError(f"file name {name!r} is invalid; use letters, digits and ._-")
        self._write(f"{self._root}/{name}", data, name, keep_existing=False)
        return f"{self.location}/{name}"

    def _put(self, part: str, encoded: bytes) -> None:
        self._write(self._path(part), encoded, part, keep_existing=True)

    def _write(self, path: str, data: bytes, what: str, *, keep_existing: bool) -> None:
        """Write to a temporary name, then rename into place. `keep_existing`: a file that is
        already there (another writer finished first) stays, and the temporary one is dropped."""
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            if isinstance(self._fs, LocalFileSystem):
                _write_private(path, temporary, data, self._root)
            else:
                self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                with self._fs.open(temporary, "wb") as handle:
                    handle.write(data)
            if keep_existing and self._fs.exists(path):
                self._fs.rm(temporary)
                return
            self._fs.mv(temporary, path)
        except OSError as exc:
            try:
                if self._fs.exists(temporary):
                    self._fs.rm(temporary)
            except OSError:
                pass
            raise self._fail("writing", what, exc) from exc


def _write_private(path: str, temporary: str, data: bytes, root: str) -> None:
    """On a local disk the run's folders are the owner's only (0700) and its files too (0600):
    they name topics, groups and connectors, and connector configs even without their secrets."""
    folder = path.rsplit("/", 1)[0]
    state = root.rstrip("/").rsplit("/", 1)[0]
    missing = []
    at = folder
    while at and not os.path.isdir(at):
        missing.append(at)
        at = at.rsplit("/", 1)[0]
    for made in reversed(missing):
        ours = made == state or made.startswith(state + "/")
        os.makedirs(made, mode=0o700 if ours else 0o777, exist_ok=True)
        if ours:
            os.chmod(made, 0o700)  # the mode given to makedirs is masked by the umask
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
