"""The run manifest (docs/DESIGN.md §6): one folder per migration run at a state location (a local path or
an object store URL), holding JSON parts that are each written once, atomically, and read back by
re-runs."""
from __future__ import annotations

import datetime
import errno
import json
import logging
import os
import re
import stat
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from kmigrate.errors import KmigrateError

log = logging.getLogger(__name__)

_PART_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
# a run id is one folder name: 1 to 200 characters (a file name may have 255; parts and temporary files
# live inside it, but other names are made from it too); ':' stays, as Airflow's run ids hold one in the
# time zone (manual__2026-11-25T16:00:00.123456+00:00), but never '::', which fsspec reads as a chain of
# file systems ("x::memory" would be run "x"'s folder)
RUN_ID_MAX = 200
RUN_ID_PATTERN = rf"[A-Za-z0-9](?:[A-Za-z0-9._+-]|:(?!:)){{0,{RUN_ID_MAX - 1}}}"  # RUN_ID_RULE as a regular expression
_RUN_ID = re.compile(RUN_ID_PATTERN)
RUN_ID_RULE = (f"1 to {RUN_ID_MAX} letters, digits and ._:+-, beginning with a letter or digit, never '::' "
               "(fsspec reads it as a chain of file systems)")
# state locations: a local folder, or an object store or HDFS (memory:// is the tests' in-process one)
STORES = ("s3", "s3a", "gs", "gcs", "abfs", "az", "hdfs", "memory")
SUPPORTED = ("an absolute local path (or file:///path) or a URL of " + ", ".join(f"{p}://" for p in STORES[:-2])
             + f" or {STORES[-2]}://")


def check_run_id(run_id: Any) -> str:
    """`run_id` when it can name a run's folder (RUN_ID_RULE); ManifestError naming it otherwise."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        name = str(run_id)
        shown = repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"
        raise ManifestError(f"run name {shown} is refused: a run name (the run's folder at the state location) "
                            f"is {RUN_ID_RULE}. Choose another run_name")
    return run_id


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
    COPY_PROGRESS = "copy-progress"              # replaced while a copy runs: partitions and offsets to go
    VERIFICATION = "verification"                # attempts: a verify job's table
    TOPIC_CONFIGS = "topic-configs"              # attempts: the copy's topic settings restored
    CONFIG_VERSIONS = "config-versions"          # attempts: source configs the target's Kafka removed, mapped
    GROUP_RESULTS = "group-replication"          # attempts: groups written on the target
    CONNECTOR_RESULTS = "connector-migration"    # attempts: connectors created on the target
    RESUMED = "resumed-connectors"               # connectors in their source state on the target
    DRILL = "drill"                              # a DR drill's RPO and RTO
    PROMOTED = "failover/promoted"               # an unplanned failover: the DR cluster promoted as it was, RPO
    PARAMS = "params"                            # what the run was asked to do, from its first trigger
    TIMELINE = "timeline"                        # timeline/<step>/<attempt>: when a step began and ended
    PRE_COPY_ROUNDS = "pre-copy-rounds"          # attempts: one pre-copy round each
    LIVE_VERIFICATION = "live-verification"      # attempts: the pre-copied ranges verified while live
    CUTOVER = "cutover"                          # cutover/<step>: the window's step, done
    CUTOVER_FAILURES = "cutover-failures"        # cutover-failures/<step>/<attempt>: a failed try of it

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
        check_run_id(run_id)
        _check_location(str(state_location))
        self.state_location = str(state_location).rstrip("/")
        self.location = f"{self.state_location}/{run_id}"
        self.run_id = run_id
        try:
            self._fs, self._root = fsspec.core.url_to_fs(self.location, **dict(storage_options or {}))
        except (ImportError, ValueError, OSError, RuntimeError) as exc:
            # hdfs:// opens libhdfs through a JVM: without one pyarrow raises OSError "Unable to load libjvm"
            need = (" (hdfs:// needs a JVM and Hadoop's libhdfs on this host: JAVA_HOME, HADOOP_HOME and "
                    "CLASSPATH set)" if self.location.lower().startswith("hdfs://") else "")
            raise ManifestError(
                f"state location {state_location!r} cannot be opened ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}){need}; use {SUPPORTED} whose file system package is "
                "installed") from exc
        if isinstance(self._fs, LocalFileSystem):
            _check_folders(self._root)

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
        """Whether the part is there. It is read: a part that is there but not whole (left by a crash)
        raises ManifestError rather than count as a step done."""
        try:
            there = bool(self._fs.exists(self._path(part)))
        except OSError as exc:
            raise self._fail("looking up", part, exc) from exc
        return there and self.read(part) is not None

    def read(self, part: str) -> dict[str, Any] | None:
        """The part's content, or None when it was never written; ManifestError, naming the file and
        the way out, when it is there but not a whole part (empty or cut short by a crash)."""
        path = self._path(part)
        try:
            with self._fs.open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("reading", part, exc) from exc
        try:
            content = json.loads(data)
        except ValueError as exc:
            content, why = None, "is empty" if not data.strip() else f"holds JSON cut short or damaged ({exc})"
        except RecursionError:  # no step writes a part nested deeper than a few levels
            content, why = None, "holds JSON nested too deep to read (thousands of levels)"
        else:
            why = f"holds a JSON {type(content).__name__}, not an object"
        if isinstance(content, dict):
            return content
        file = path if isinstance(self._fs, LocalFileSystem) else f"{self.location}/{part}.json"
        raise ManifestError(
            f"part {part!r} of the run manifest at {self.location} is not whole: {file} ({len(data)} bytes) {why}; "
            "a crash or power loss while it was written leaves such a file (or something else wrote it). "
            f"Delete {file} to have the step that writes it run again, or restore it from a backup, then retry")

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

    def replace(self, part: str, data: Mapping[str, Any]) -> None:
        """Write the part whether it exists or not (a part replaced on every write: a running
        mirror's status); a reader sees the old content or the new, whole."""
        self._write(self._path(part), _encode(data), part, keep_existing=False)

    def parts(self) -> list[str]:
        """Names of the stored parts, sorted."""
        try:
            files = self._fs.find(self._root) if self._fs.exists(self._root) else []
        except OSError as exc:
            raise self._fail("listing", "*", exc) from exc
        prefix = self._root.rstrip("/") + "/"
        return sorted(f[len(prefix):-len(".json")] for f in files if f.endswith(".json") and ".tmp-" not in f)

    def has_file(self, name: str) -> bool:
        """Whether the derived file `name` (put_file's) is there."""
        try:
            return bool(self._fs.exists(f"{self._root}/{name}"))
        except OSError as exc:
            raise self._fail("looking up", name, exc) from exc

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
        """Write to a temporary name, then put it in place. `keep_existing`: a file that is already
        there (another writer finished first) stays, and the temporary one is dropped.

        On a local disk the part is durable and written once for real: the temporary file is synced
        to disk before it goes in place, and the folder after (a power loss leaves the part whole or
        absent); with `keep_existing` it goes in place by a hard link, which fails when the name is
        taken, so of concurrent writers exactly one wins (a file system without hard links falls back
        to look-then-rename, with a warning).
        On another fsspec file system it is the best that system offers: the temporary object is
        written whole and moved (an object store's move is a copy of the whole object, so a reader sees
        a whole part or none; the store's own durability applies); written once is look-then-move,
        so two writers of one part in the same instant may both see their own content stored."""
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            if isinstance(self._fs, LocalFileSystem):
                _write_local(path, temporary, data, self._root, keep_existing)
                return
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_location(location: str) -> None:
    """Refuse a state location that is not a local folder or an object store, before anything is read
    or written: an http(s) server would be read from (and cannot be written once), an fsspec chain
    ('::') reads one store through another."""
    protocol = location.split("://", 1)[0].lower() if "://" in location else None
    if _CONTROL.search(location):  # a NUL ends a path at the OS (ValueError); none belongs in a folder's name
        why = "it holds a control character (a NUL, a newline, ...)"
    elif "::" in location:
        why = "it is an fsspec chain ('::'), which reads one file system through another"
    elif protocol in ("http", "https"):
        why = "a web server is no state location: parts are written once, atomically, and kept"
    elif protocol not in (None, "file", *STORES):
        why = f"{protocol}:// is not a supported file system"
    elif protocol in (None, "file") and not location.split("://", 1)[-1].startswith("/"):
        why = "a local path must be absolute (a relative one depends on the worker's current folder)"
    else:
        return
    raise ManifestError(f"state location {location!r} is refused: {why}. Use {SUPPORTED}")


def _check_folders(run_folder: str) -> None:
    """The state location's folder and the run's folder, where they exist, must be this user's and not
    writable by others: someone who can write there can change what a re-run believes was done."""
    for folder in (run_folder.rstrip("/").rsplit("/", 1)[0] or "/", run_folder):
        try:
            held = os.stat(folder)
            link = os.lstat(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not made yet (or a file in the way: writing there fails naming it)
        except OSError as exc:
            raise ManifestError(f"state folder {folder} cannot be looked at ({exc}); check the state_location") from exc
        if not stat.S_ISDIR(held.st_mode):
            continue  # writing there fails with its own error, naming the folder
        uid = os.geteuid()
        others = held.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        foreign_link = stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0)  # its owner may point it elsewhere
        if held.st_uid == uid and not others and not foreign_link:
            continue
        raise ManifestError(
            f"state folder {folder} is refused: it is owned by {_user(held.st_uid)} with mode "
            f"{stat.S_IMODE(held.st_mode):04o}" + (f" (through a link owned by {_user(link.st_uid)})" if foreign_link
                                                   else "")
            + f"; a run's state must be owned and writable by the run's user only ({_user(uid)}), as whoever may "
            f"write there decides what a re-run believes was done. "
            + ("It is a shared folder (sticky, like /tmp): choose a state_location of your own, such as a folder "
               "inside it" if held.st_mode & stat.S_ISVTX else
               f"Fix it with `chown {_name(uid)} {folder}` and `chmod 700 {folder}` if its content is trusted, or "
               "choose another state_location"))


def _user(uid: int) -> str:
    return f"{_name(uid)} (uid {uid})"


def _name(uid: int) -> str:
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _write_local(path: str, temporary: str, data: bytes, root: str, keep_existing: bool) -> None:
    """On a local disk the run's folders are the owner's only (0700) and its files too (0600):
    they name topics, groups and connectors, and connector configs even without their secrets.
    The data and then the folder are synced to disk; see Manifest._write."""
    folder = path.rsplit("/", 1)[0]
    made = _make_folders(folder, root)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if keep_existing:
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another writer's part is in place: the caller reads and compares it
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                log.warning("%s: no hard links on this file system (%s); the part is put in place by "
                            "look-then-rename, which two writers at one instant may both pass", folder, exc)
                if not os.path.exists(path):
                    os.replace(temporary, path)
        else:
            os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
    for synced in [folder, *(new.rsplit("/", 1)[0] or "/" for new in made)]:
        _sync_folder(synced)


def _make_folders(folder: str, root: str) -> list[str]:
    """Create `folder` and its missing parents (the run's own ones 0700); the ones made, deepest first."""
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
    return missing


def _sync_folder(folder: str) -> None:
    """Sync a folder's entries (a file renamed or linked into it, a folder made in it) to disk."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
