"""What a run was asked to do (its params at the first trigger), kept in its manifest: the same
run name triggered again with other params is refused before anything is done, since its manifest
already records a snapshot, plans and copies made for the first request.

The record keeps no secret in clear: each `connector_overrides` value (often a database password)
and the password of any URL param (an fsspec `state_location` like sftp://user:pw@host/...) are
kept as a salted, stretched digest (PBKDF2-SHA256, a random salt per run), so that the same
params triggered again still compare equal and another value is still told apart; a conflict
names the differing override key and says `<value differs>`, never a value.

The same params, read once (`RunRequest.from_params`): every DAG's task, and any other caller, takes
the run's name, clusters, selection and settings from one typed request, each param's name, default
and rule written here once; the record keeps the params as they were given."""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from kmigrate.errors import ConfigError, RunConflict
from kmigrate.manifest import Manifest, ManifestError, Part, check_run_id
from kmigrate.renames import PARAMS as RENAME_PARAMS, Renames
from kmigrate.run.checks.selection import DEFAULT_SCOPE, Selection
from kmigrate.run.checks.schedule import read_cutover_at

# how a run executes, not what it does: these may change between tries of one run, and are never
# recorded. spark_remote (a Spark Connect URL, which may carry a token) was the param before
# spark_connect_conn_id: still left out, so that a run triggered again with its old conf compares
EXECUTION_PARAMS = frozenset({"dry_run", "spark_connect_conn_id", "spark_remote", "spark_parallelism"})
# params whose every value is a secret's place: kept as digests only
OVERRIDES = "connector_overrides"
_ITERATIONS = 20_000  # a guess at a weak password costs 20,000 hashes; a check, a few ms a value
_DIFFERS = "<value differs>"


def _digest(salt: str, *parts: Any) -> str:
    text = "\0".join(json.dumps(p, sort_keys=True, default=str) for p in parts)
    return "pbkdf2-sha256:" + hashlib.pbkdf2_hmac("sha256", text.encode(), salt.encode(), _ITERATIONS).hex()[:32]


def _masked_url(name: str, value: str, salt: str) -> str:
    """`value` with the password of a URL's user part replaced by its digest."""
    if "://" not in value or "@" not in value:
        return value
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    userinfo, host = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:{_digest(salt, name, password)}@{host}").geturl()


def _what(params: Mapping[str, Any], salt: str) -> dict[str, Any]:
    """The params that say what the run does, as recorded: secrets as digests (see above)."""
    out = json.loads(json.dumps({k: v for k, v in params.items() if k not in EXECUTION_PARAMS}, default=str))
    overrides = out.get(OVERRIDES)
    if OVERRIDES in out and not overrides:
        out[OVERRIDES] = {}  # none given, empty or null: the same request
    elif isinstance(overrides, dict):
        out[OVERRIDES] = {name: ({key: _digest(salt, name, key, value) for key, value in config.items()}
                                 if isinstance(config, dict) else _digest(salt, name, config))
                          for name, config in overrides.items()}
    elif OVERRIDES in out:
        out[OVERRIDES] = _digest(salt, overrides)
    # a rename param left empty is no rename: the same request as one recorded before the run took them
    out = {k: v for k, v in out.items() if k not in RENAME_PARAMS or v}
    return {k: _masked_url(k, v, salt) if isinstance(v, str) else v for k, v in out.items()}


def _override_changes(before: Any, wanted: Any) -> list[str]:
    """Which connector's override keys differ, never their values."""
    if not isinstance(before, dict) or not isinstance(wanted, dict):
        return [f"{OVERRIDES}: {_DIFFERS}"]
    out = []
    for name in sorted(set(before) | set(wanted)):
        was, now = before.get(name), wanted.get(name)
        if not isinstance(was, dict) or not isinstance(now, dict):
            if was != now:
                out.append(f"{OVERRIDES}[{name!r}]: {'none' if was is None else 'set'} then, "
                           f"{'none' if now is None else 'set'} now")
            continue
        for key in sorted(set(was) | set(now)):
            if key not in was or key not in now:
                out.append(f"{OVERRIDES}[{name!r}][{key!r}]: {'set' if key in was else 'not set'} then, "
                           f"{'set' if key in now else 'not set'} now")
            elif was[key] != now[key]:
                out.append(f"{OVERRIDES}[{name!r}][{key!r}]: {_DIFFERS}")
    return out


def check_request(manifest: Manifest, params: Mapping[str, Any]) -> bool:
    """Refuse `params` when the run's recorded request differs (read-only). Returns whether the
    run has a recorded request (it was started before; the same params, then)."""
    recorded = manifest.read(Part.PARAMS)
    if recorded is None:
        return False
    if not isinstance(recorded.get("params"), dict) or not isinstance(recorded.get("salt", ""), str):
        raise ManifestError(
            f"part {Part.PARAMS!r} of the run manifest at {manifest.location} is not a recorded request (it holds "
            f"{', '.join(sorted(map(str, recorded))) or 'no key'}; a request is {{\"params\": {{...}}, \"salt\": "
            "\"...\"}): something else wrote it. Restore it from a backup, or trigger a new run_name; nothing was done")
    salt = recorded.get("salt", "")
    wanted = _what(params, salt)
    # a request recorded before secrets were kept as digests holds them in clear: compared as digests
    before = recorded["params"] if "salt" in recorded else _what(recorded["params"], salt)
    differ = sorted(k for k in set(wanted) | set(before) if wanted.get(k) != before.get(k))
    if differ:
        detail = "; ".join(("; ".join(_override_changes(before.get(k) or {}, wanted.get(k) or {}))
                            or f"{k}: {_DIFFERS}") if k == OVERRIDES
                           else f"{k}: {before.get(k)!r} then, {wanted.get(k)!r} now" for k in differ)
        raise RunConflict(
            f"run {manifest.run_id!r} was started with other params ({detail}). A run name names one migration: "
            f"trigger it again with the params it was started with to continue or confirm it, or choose a new "
            f"run_name for a new migration. Nothing was done")
    return True


def record_request(manifest: Manifest, params: Mapping[str, Any]) -> dict[str, Any]:
    """The run's request, recorded by its first non-dry trigger (a re-run keeps it)."""
    check_request(manifest, params)
    salt = secrets.token_hex(16)
    return manifest.get_or_create(Part.PARAMS, lambda: {"params": _what(params, salt), "salt": salt})


# the params' defaults where a DAG may leave one out (the trigger form states the same: kmigrate_airflow.params)
# member_session_timeout_s: how long a consumer group member may stay after its consumer stopped without
# leaving (Kafka Streams closes so; the broker expires it after the group's session.timeout.ms, 45 s by default)
MEMBER_TIMEOUT_S = 45
QUIESCE_MAX_S = 3600  # quiesce_seconds (and member_session_timeout_s) at most
# a mirror's timings (kmigrate.run.mirror.timings checks them, and holds its verification and term periods): its
# status interval, how often it reads its selection again, and the age of its heartbeat past which it is taken
# for gone (by its follower, which restarts it; by a failover, a drill and the last move, which take it for
# stopped); of a mirror's spec, its job's arguments, the DR DAGs' params and the library's defaults alike
INTERVAL_S = 1.0
REFRESH_S = 10.0
STALE_AFTER_S = 60.0
MOVE_WAIT_S = 300.0  # move_wait_s
MOVE_WAIT_MIN_S = 1  # move_wait_s at least
MOVE_QUIET_S = 1.0  # move_quiet_s: how long promoted topics' ends stand still before their writers count as stopped
MOVE_MAX_S = 3600  # move_wait_s and move_quiet_s at most
# a migration's pre-copy rounds (kmigrate.run.copying.precopy): on unless turned off (pre_copy), at most this many a
# pre-copy, and no further round once the source wrote at most this many records during one
PRE_COPY = True
PRE_COPY_MAX_ROUNDS = 5
PRE_COPY_ROUNDS_MOST = 100  # pre_copy_max_rounds at most (and at least 1)
PRE_COPY_CONVERGED_RECORDS = 10_000


def run_name(params: Mapping[str, Any], run_id: str | None) -> str | None:
    """The run a request names: its `run_name`, else the run id it was triggered as (Airflow's)."""
    return params.get("run_name") or run_id


@dataclasses.dataclass(frozen=True)
class SparkSettings:
    """Where and how wide a run's Spark jobs run: `tasks_at_once`, the Spark tasks a job runs at once
    (the `spark_parallelism` param, a job's --parallelism; 0: the application's task slots): a task
    of a copy or a verification takes its partitions one after another, the mirror's long-running
    tasks follow several each together; and the Airflow connection of a Spark Connect server ("":
    none)."""

    tasks_at_once: int = 0
    connect_conn_id: str = ""


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """A run's params, read and checked once (`from_params`): its name, where its manifest is, the
    connections of its clusters, what it selects and the names that takes on the target (`renames`),
    and how its steps and jobs run. `params` keeps them as given: the run records those
    (`record_request`). A DAG that does not take a param leaves its field at the default (the drill
    has no connectors, the rollback no selection, no DAG yet a rename)."""

    params: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)
    name: str
    state_location: str
    source_kafka_conn_id: str = ""
    target_kafka_conn_id: str = ""
    source_connect_conn_id: str = ""
    target_connect_conn_id: str = ""
    topics_include: str | None = None
    topics_exclude: str = ""
    groups: str = ""
    # None: the DAG has no connectors param (a drill: its mirror's, if any); empty or null: none (a rollback's:
    # all of the run's)
    connectors: tuple[str, ...] | None = None
    translate_topics: str = ""
    acls: str = DEFAULT_SCOPE
    renames: Renames = Renames()  # the names of its topics and groups on the target (none: the source's)
    connector_overrides: Mapping[str, Any] | None = None
    pre_copy: bool = PRE_COPY
    pre_copy_max_rounds: int = PRE_COPY_MAX_ROUNDS
    pre_copy_converged_records: int = PRE_COPY_CONVERGED_RECORDS
    cutover_at: datetime.datetime | None = None
    cutover_zoned: bool = True  # cutover_at given with its zone (one without is read as UTC; a new run refuses it)
    quiesce_seconds: int | None = None  # none: the DAG has no cutover window
    member_session_timeout_s: int = MEMBER_TIMEOUT_S
    dry_run: bool = False
    spark: SparkSettings = SparkSettings()
    mirror_run: str = ""  # a drill of this mirror
    # the mirror whose selection and names the run moves in place of its own (kmigrate.run.mirror.spec.
    # with_mirror_selection: a drill's, a planned failover's); "": its own. Not a param: set with that selection
    mirror_selection: str = ""
    failback_of: str = ""  # a mirror back to the original of this failed-over mirror
    rebuild_diverged: bool = False
    unplanned: bool = False
    stale_after_s: float = STALE_AFTER_S
    interval_s: float | None = None  # a mirror's status interval (its timings: kmigrate.run.mirror.timings)
    refresh_s: float | None = None  # a mirror's selection refresh
    move_groups: tuple[str, ...] = ()  # consumer groups moved onto a mirror's DR cluster (kmigrate.run.mirror.moves)
    move_wait_s: float = MOVE_WAIT_S  # how long a move waits for its application to stop, and for the mirror
    move_topics: tuple[str, ...] = ()  # topics promoted on a mirror's DR cluster (kmigrate.run.mirror.producer_moves)
    move_quiet_s: float = MOVE_QUIET_S
    move_back: bool = False  # the moved groups moved back to the source (kmigrate.run.mirror.moves.move_group_back)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], run_id: str | None = None) -> RunRequest:
        """The request of `params` (a DAG run's, or a command line's) as run `run_id`: named by its
        `run_name`, else by `run_id`. ConfigError (ManifestError for the name) naming the param that
        breaks its rule, and what to give instead; an optional param left empty takes its default."""
        p = params
        cutover_at, cutover_zoned = read_cutover_at(p.get("cutover_at"))
        return cls(
            params=params,
            name=check_run_id(run_name(p, run_id)),
            state_location=p.get("state_location") or "",
            source_kafka_conn_id=p.get("source_kafka_conn_id") or "",
            target_kafka_conn_id=p.get("target_kafka_conn_id") or "",
            source_connect_conn_id=p.get("source_connect_conn_id") or "",
            target_connect_conn_id=p.get("target_connect_conn_id") or "",
            topics_include=p.get("topics_include"),
            topics_exclude=p.get("topics_exclude") or "",
            groups=p.get("groups") or "",
            connectors=_connectors(p),
            translate_topics=p.get("translate_topics") or "",
            acls=p.get("acls") or DEFAULT_SCOPE,
            renames=Renames.from_params(p),
            connector_overrides=p.get("connector_overrides"),
            pre_copy=PRE_COPY if p.get("pre_copy") in (None, "") else bool(p["pre_copy"]),
            pre_copy_max_rounds=_integer(p, "pre_copy_max_rounds", PRE_COPY_MAX_ROUNDS, least=1,
                                         most=PRE_COPY_ROUNDS_MOST),
            pre_copy_converged_records=_integer(p, "pre_copy_converged_records", PRE_COPY_CONVERGED_RECORDS),
            cutover_at=cutover_at,
            cutover_zoned=cutover_zoned,
            quiesce_seconds=_integer(p, "quiesce_seconds", None, most=QUIESCE_MAX_S),
            member_session_timeout_s=_integer(p, "member_session_timeout_s", MEMBER_TIMEOUT_S, most=QUIESCE_MAX_S),
            dry_run=bool(p.get("dry_run")),
            spark=SparkSettings(_integer(p, "spark_parallelism", 0), p.get("spark_connect_conn_id") or ""),
            mirror_run=p.get("mirror_run") or "",
            failback_of=p.get("failback_of") or "",
            rebuild_diverged=bool(p.get("rebuild_diverged")),
            unplanned=bool(p.get("unplanned")),
            stale_after_s=_seconds(p, "stale_after_s", STALE_AFTER_S),
            interval_s=_seconds(p, "interval_s", None),
            refresh_s=_seconds(p, "refresh_s", None),
            move_groups=_names(p, "move_groups"),
            move_wait_s=_seconds(p, "move_wait_s", MOVE_WAIT_S, least=MOVE_WAIT_MIN_S, most=MOVE_MAX_S),
            move_topics=_names(p, "move_topics"),
            move_quiet_s=_seconds(p, "move_quiet_s", MOVE_QUIET_S, most=MOVE_MAX_S),
            move_back=bool(p.get("move_back")),
        )

    @property
    def selection(self) -> Selection:
        """What the run moves: its topics and groups, its connectors, translate mode and ACL scope."""
        return Selection(self.topics_include, self.topics_exclude, self.groups, self.connectors or (),
                         self.translate_topics, self.acls)

    def renames_for(self, topics: Iterable[str], groups: Iterable[str] = ()) -> Renames:
        """The run's renames as it holds them to what it selects now (its source `topics` and `groups`):
        as given; a mirror's (`mirror_selection`) restricted to them (`Renames.only`), its entries for
        what is not selected now (promoted, moved or deleted since) left out rather than refused."""
        return self.renames.only(topics, groups) if self.mirror_selection else self.renames

    def with_params(self, **changed: Any) -> RunRequest:
        """The request of these params changed (a failover's and a drill's: their mirror's selection)."""
        return RunRequest.from_params({**self.params, **changed}, self.name)


def _integer(params: Mapping[str, Any], name: str, default: int | None, *, least: int = 0,
             most: int | None = None) -> int | None:
    """The param `name`, a whole number from `least` up to `most`; `default` when it is absent or empty."""
    value = params.get(name)
    if value is None or value == "":
        return default
    if (isinstance(value, bool) or not isinstance(value, int) or value < least
            or (most is not None and value > most)):
        bound = f"to {most}" if most is not None else "up"
        raise ConfigError(f"{name} is {value!r}; give a whole number from {least} {bound}, or leave it out for its "
                          f"default ({default})")
    return value


def _connectors(params: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The `connectors` param, a list of connector names: None when the params have no such key, empty
    when it is left empty (null, "" or [])."""
    if "connectors" not in params:
        return None
    value = params["connectors"]
    if value is None or value == "":
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise ConfigError(f"connectors is {type(value).__name__} {value!r}, not a list of connector names; "
                          'give ["name", ...] (empty: none)')
    return tuple(value)


def _names(params: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The param `name`, a list of names (none: empty), each a non-empty string, none twice."""
    value = params.get(name) or []
    if isinstance(value, str) or not all(isinstance(v, str) and v for v in value) or len(set(value)) != len(value):
        raise ConfigError(f"{name} is {value!r}; give a list of names, each once (a consumer group's id, say)")
    return tuple(value)


def _seconds(params: Mapping[str, Any], name: str, default: float | None, *, least: float = 0,
             most: float | None = None) -> float | None:
    """The param `name`, a number of seconds from `least` up to `most`, as given; `default` when it is absent or
    empty."""
    value = params.get(name)
    if value is None or value == "":
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value < least
            or (most is not None and value > most)):
        bound = f"from {least:g} to {most:g}" if most is not None else f"{least:g} or more"
        raise ConfigError(f"{name} is {value!r}; give a number of seconds, {bound}"
                          + (f", or leave it out for its default ({default:g})" if default is not None else ""))
    return value
