"""The shapes of the records in the claims log (`kmigrate.claims`), checked before a record changes
anything: the log is written by any process with Write on the topic, of any version, and a record
the fold cannot read must leave every reader's state as it was, never stop the fold.

`problem(record)` says why a record cannot be folded (None when it can); the entries a fold keeps
(`run_entry`, `lease_entry`, `source_entry`) hold only the fields the fold, `Claims.holds` and the
leases read, each of the type they are read as, so that a snapshot carries nothing else forward."""
from __future__ import annotations

import math
from typing import Any

KINDS = ("snapshot", "run", "run-release", "lease", "lease-release", "lease-renewal")


def run_key(run: str, deployment: str) -> str:
    """The key of a run's claim in `Claims.runs`: the run's name alone for a claim of no deployment
    (as written before claims named one, so an old snapshot's keys stay what they were), else
    name NUL deployment. A run name holding NUL is refused (`problem`): no two claims share a key."""
    return run if not deployment else f"{run}\x00{deployment}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lease_ms(value: Any) -> int | None:
    """A lease's length as a whole number of ms; None for anything else (a bool, text, NaN, infinity)."""
    if _is_int(value):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0:
        return int(value)
    return None


def _optional(record: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> bool:
    value = record.get(name)
    return value is None or (isinstance(value, kind) and not isinstance(value, bool))


def _run_name(value: Any) -> bool:
    return isinstance(value, str) and "\x00" not in value


def _topics(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(topic, str) for topic in value)


def _run_problem(record: dict[str, Any]) -> str | None:
    if not _run_name(record.get("run")):
        return "its run is not a name"
    if not isinstance(record.get("deployment", ""), str):
        return "its deployment is not a string"
    if not _topics(record.get("topics")):
        return "its topics are not a list of names"
    if not all(_optional(record, name, str) for name in ("dag", "host", "source_id")):
        return "its dag, host or source_id is not a string"
    return None


def _lease_fields_problem(record: dict[str, Any]) -> str | None:
    if not isinstance(record.get("holder"), str):
        return "its holder is not a string"
    if _lease_ms(record.get("lease_ms")) is None:
        return "its lease_ms is not a finite number of ms"
    if not all(_optional(record, name, str) for name in ("run", "host", "started")) or not _optional(record, "pid", int):
        return "its run, host, pid or started is of another type"
    return None


def _entries_problem(entries: Any, check: Any, what: str) -> str | None:
    if not isinstance(entries, dict):
        return f"its {what} are not an object"
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            return f"its {what} entry {key[:60]!r} is not an object"
        why = check(key, entry)
        if why:
            return f"its {what} entry {key[:60]!r}: {why}"
    return None


def _snapshot_run_problem(key: str, entry: dict[str, Any]) -> str | None:
    why = _run_problem(entry)
    if why is None and not _is_int(entry.get("ts")):
        why = "its ts is not a whole number"
    if why is None and run_key(entry["run"], entry.get("deployment", "")) != key:
        why = "its key is not its run's"
    return why


def _snapshot_lease_problem(_key: str, entry: dict[str, Any]) -> str | None:
    return _lease_fields_problem(entry) or (None if _is_int(entry.get("ts")) else "its ts is not a whole number")


def _source_problem(_key: str, entry: dict[str, Any]) -> str | None:
    return None if isinstance(entry.get("run"), str) and _is_int(entry.get("ts")) else "not a run name and a time"


def _snapshot_problem(record: dict[str, Any]) -> str | None:
    through, chunk, of = record.get("through"), record.get("chunk", 0), record.get("of", 1)
    if not (_is_int(through) and _is_int(chunk) and _is_int(of) and 0 <= chunk < of):
        return "its through, chunk or of is not a whole number in range"
    if not _optional(record, "born", int):
        return "its born is not a whole number"
    leased = record.get("leased")
    if not isinstance(leased, list) or not all(isinstance(scope, str) for scope in leased):
        return "its leased is not a list of scopes"
    return (_entries_problem(record.get("runs"), _snapshot_run_problem, "runs")
            or _entries_problem(record.get("parts"), _snapshot_lease_problem, "parts")
            or _entries_problem(record.get("sources", {}), _source_problem, "sources"))


def problem(record: Any) -> str | None:
    """Why `record` cannot be folded (a sentence naming the field); None when its shape is one the
    fold reads: every field the fold uses of the type it is used as, numbers finite."""
    if not isinstance(record, dict):
        return "it is not an object"
    kind = record.get("kind")
    if kind not in KINDS:
        return f"its kind {str(kind)[:40]!r} is not one this version knows"
    if kind == "snapshot":
        return _snapshot_problem(record)
    if kind == "run":
        return _run_problem(record)
    if kind == "run-release":
        if not _run_name(record.get("run")) or not isinstance(record.get("deployment", ""), str):
            return "its run or deployment is not a string"
        return None if isinstance(record.get("force", False), bool) else "its force is not true or false"
    if kind == "lease-renewal":  # many leases of one process renewed in one record: {scope: holder}
        holders = record.get("holders")
        if not isinstance(holders, dict) or not all(isinstance(h, str) for h in holders.values()):
            return "its holders are not an object of scopes and holders"
        return _lease_fields_problem({**record, "holder": ""})
    if not isinstance(record.get("scope"), str):
        return "its scope is not a string"
    if kind == "lease":
        why = _lease_fields_problem(record)
        if why is None and not (_optional(record, "breaks", str) and isinstance(record.get("target_empty", False), bool)):
            why = "its breaks or target_empty is of another type"
        return why
    return None if isinstance(record.get("holder"), str) else "its holder is not a string"  # lease-release


def run_entry(record: dict[str, Any], topics: list[str], ts_ms: int) -> dict[str, Any]:
    """A run's claim as the fold keeps it (from a checked run claim or snapshot entry)."""
    return {"run": record["run"], "deployment": record.get("deployment", ""), "topics": topics,
            "dag": record.get("dag"), "host": record.get("host"), "ts": ts_ms}


def lease_entry(record: dict[str, Any], ts_ms: int) -> dict[str, Any]:
    """A lease as the fold keeps it: its holder and length, and who holds it (leases read host, pid and
    started to tell a holder gone, run and host to name it)."""
    entry = {"holder": record["holder"], "lease_ms": _lease_ms(record["lease_ms"]), "ts": ts_ms}
    entry.update({name: record[name] for name in ("run", "host", "pid", "started") if record.get(name) is not None})
    return entry


def source_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {"run": entry["run"], "ts": entry["ts"]}
