"""The state the claims log describes and the rule that folds it (`Claims.apply`), the same in every
reader: which run holds which topics (a run is its name and its deployment), which copier holds
which partition, which source clusters ever claimed runs here, and the snapshots that carry all of
it past a trim (docs/DESIGN.md §4.7). Pure logic: no Kafka here (the log is `kmigrate.claims.log`)."""
from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from kmigrate.claims.records import lease_entry, problem, run_entry, run_key, source_entry

log = logging.getLogger(__name__)

# How long into the log's life `leased` is kept. The young-log rule reads it only for a lease longer
# than the log's age (`Claims.born`), and the copiers' leases run 30 s (claims.leases.LEASE_S): past
# this age it is emptied and grows no more, so the state does not carry every partition ever leased
# (25,000 scopes, 1.9 MB, on a test cluster after some weeks; 20,000 more for each run of that size).
# A longer lease asked in a log older than this is granted only where the target partition is empty.
LEASED_KEPT_MS = 600_000


class Claims:
    """The state the claims log describes, folded record by record in log order."""

    def __init__(self) -> None:
        # run_key(run, deployment) -> its claim (run, deployment, topics, dag, host, ts): the same run
        # name from another DAG or Airflow deployment is another run
        self.runs: dict[str, dict[str, Any]] = {}
        self.parts: dict[str, dict[str, Any]] = {}  # "topic:partition" -> the lease (holder, ts, lease_ms, ...)
        # broker time of the log's first record (offset 0), once read: a log younger than a lease grants
        # a lease only on a target partition its claimant found empty, or one already leased in this
        # log, so that a copier holding a lease in a claims topic deleted since has stopped writing
        self.born: int | None = None
        self.leased: set[str] = set()  # scopes a lease took effect on in this log while young (LEASED_KEPT_MS)
        # source cluster id -> {"run": the first run that claimed with it, "ts"}: kept through releases
        self.sources: dict[str, dict[str, Any]] = {}
        self.unreadable: str | None = None  # why the last record applied could not be read; None if it could
        self._pending: dict[str, Any] | None = None  # the chunks of a snapshot folded so far, not in effect yet

    def conflicts(self, run: str, topics: Collection[str], deployment: str = "") -> dict[str, list[str]]:
        """The other claims holding any of `topics` (another run name, or the same of another
        deployment), by their key in `runs`, with those topics."""
        wanted, mine = set(topics), run_key(run, deployment)
        return {key: sorted(wanted & set(claim["topics"])) for key, claim in self.runs.items()
                if key != mine and wanted & set(claim["topics"])}

    def apply(self, ts_ms: int, record: Any, offset: int = -1) -> bool:
        """Fold one record (broker timestamp `ts_ms`, at `offset`); True when it took effect. A record
        whose shape this version cannot read (another version's, not ours, damaged) changes nothing,
        for every reader alike, and says why in `unreadable`."""
        try:
            self.unreadable = problem(record)
            return self.unreadable is None and self._apply(ts_ms, record, offset)
        except Exception as exc:  # noqa: BLE001 (the shape is checked first; still, no record may stop the fold)
            self.unreadable = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.warning("claims record at offset %d not folded: %s", offset, self.unreadable)
            return False
        finally:
            if self.leased and not self._young(ts_ms):  # at every record alike, whatever its outcome
                self.leased.clear()

    def _young(self, ts_ms: int) -> bool:
        """Whether `leased` is still kept at broker time `ts_ms` (LEASED_KEPT_MS); with the log's birth
        unknown the young-log rule never applies, so it is not kept either."""
        return self.born is not None and ts_ms - self.born < LEASED_KEPT_MS

    def snapshot(self, through: int) -> dict[str, Any]:
        """This state as one record, to take effect at offset `through` (the next one this state has not folded)."""
        return {"kind": "snapshot", "through": through, "chunk": 0, "of": 1, "runs": self.runs, "parts": self.parts,
                "born": self.born, "leased": sorted(self.leased), "sources": self.sources}

    def snapshot_chunks(self, through: int, max_bytes: int) -> list[dict[str, Any]]:
        """This state as records of at most about `max_bytes` of JSON each, to be appended together at
        `through`, `through + 1`, ... (`apply` takes them in only so, and only once the last is read)."""
        items: list[tuple[str, Any, Any]] = [("runs", k, v) for k, v in self.runs.items()]
        items += [("parts", k, v) for k, v in self.parts.items()]
        items += [("leased", scope, None) for scope in sorted(self.leased)]
        items += [("sources", k, v) for k, v in self.sources.items()]
        budget = max_bytes - len(json.dumps(self.snapshot(through) | {"runs": {}, "parts": {}, "leased": [],
                                                                       "sources": {}, "of": 1 << 32}))
        chunks: list[dict[str, Any]] = []
        size = budget + 1
        for what, key, value in items:
            grown = len(json.dumps(key)) + (len(json.dumps(value, sort_keys=True)) + 2 if what != "leased" else 0) + 2
            if size + grown > budget:  # one entry alone over the budget still gets a chunk of its own
                chunks.append({"runs": {}, "parts": {}, "leased": [], "sources": {}})
                size = 0
            size += grown
            if what == "leased":
                chunks[-1]["leased"].append(key)
            else:
                chunks[-1][what][key] = value
        chunks = chunks or [{"runs": {}, "parts": {}, "leased": [], "sources": {}}]
        return [{"kind": "snapshot", "through": through, "chunk": i, "of": len(chunks), "born": self.born, **chunk}
                for i, chunk in enumerate(chunks)]

    def holds(self, record: dict[str, Any]) -> bool:
        """Whether the state is what `record` asked for: its outcome, for a record of this reader's that a
        snapshot folded in before the reader read it (the log was trimmed past it meanwhile)."""
        kind, holder = record.get("kind"), self.parts.get(record.get("scope", ""), {}).get("holder")
        if kind == "run":
            key = run_key(record["run"], record.get("deployment", ""))
            return set(record["topics"]) <= set(self.runs.get(key, {}).get("topics", ()))
        if kind == "run-release":
            return not self._released(record)
        if kind == "lease-renewal":
            return all(self.parts.get(scope, {}).get("holder") == h for scope, h in record["holders"].items())
        return (holder == record.get("holder")) == (kind == "lease")

    def _released(self, record: dict[str, Any]) -> list[str]:
        """The keys in `runs` a run-release names: its run of its deployment (none: the empty one, as
        records written before deployments); with force and no deployment, every deployment's."""
        if record.get("force") is True and "deployment" not in record:
            return [key for key, claim in self.runs.items() if claim["run"] == record["run"]]
        key = run_key(record["run"], record.get("deployment", ""))
        return [key] if key in self.runs else []

    def _apply(self, ts_ms: int, record: dict[str, Any], offset: int) -> bool:
        kind = record["kind"]
        if kind == "snapshot":
            return self._apply_chunk(record, offset)
        if kind == "run":
            run, deployment = record["run"], record.get("deployment", "")
            if self.conflicts(run, record["topics"], deployment):
                return False
            held = self.runs.get(run_key(run, deployment), {"topics": []})
            self.runs[run_key(run, deployment)] = run_entry(record, sorted(set(held["topics"]) | set(record["topics"])),
                                                            ts_ms)
            if record.get("source_id") is not None:
                self.sources.setdefault(record["source_id"], {"run": run, "ts": ts_ms})
            return True
        if kind == "run-release":  # by its own deployment (the run's report), or forced by hand (the CLI)
            released = self._released(record)
            for key in released:
                del self.runs[key]
            return bool(released)
        if kind == "lease-renewal":
            return self._renew(ts_ms, record)
        held = self.parts.get(record["scope"])
        if kind == "lease":
            lease_ms = lease_entry(record, ts_ms)["lease_ms"]  # a whole number: a later record is compared with it
            if (self.born is not None and ts_ms - self.born < lease_ms and record.get("target_empty") is not True
                    and record["scope"] not in self.leased):
                return False  # the claims topic is new (or was deleted and created again): see `born`
            if (held and held["holder"] != record["holder"] and ts_ms - held["ts"] <= held["lease_ms"]
                    and record.get("breaks") != held["holder"]):
                return False
            self.parts[record["scope"]] = lease_entry(record, ts_ms)
            if self._young(ts_ms):
                self.leased.add(record["scope"])
            return True
        if held and held["holder"] == record["holder"]:  # lease-release: by its holder only
            del self.parts[record["scope"]]
            return True
        return False

    def _renew(self, ts_ms: int, record: dict[str, Any]) -> bool:
        """A renewal of many leases: each scope still held by the holder the record names for it is
        renewed (from `ts_ms`, as a lease record of that holder would), any other left as it is (a
        renewal never takes a lease: one lost, released or never held stays so). True when every
        scope was renewed."""
        renewed = 0
        for scope, holder in record["holders"].items():
            held = self.parts.get(scope)
            if held is not None and held["holder"] == holder:
                self.parts[scope] = lease_entry({**record, "holder": holder}, ts_ms)
                renewed += 1
        return renewed == len(record["holders"])

    def _apply_chunk(self, record: dict[str, Any], offset: int) -> bool:
        """A snapshot is in effect only at the offsets it was taken for: its chunks at `through`,
        `through + 1`, ... with nothing landed between its fold and its last chunk; then all of it at
        once, else none of it."""
        through, chunk, of = record["through"], record.get("chunk", 0), record.get("of", 1)
        if offset != through + chunk:
            self._pending = None
            return False
        if chunk == 0:
            self._pending = {"through": through, "of": of, "next": 0, "runs": {}, "parts": {}, "leased": [],
                             "sources": {}, "born": record.get("born")}
        pending = self._pending
        if pending is None or pending["through"] != through or pending["of"] != of or pending["next"] != chunk:
            self._pending = None
            return False
        pending["runs"].update({key: run_entry(entry, sorted(set(entry["topics"])), entry["ts"])
                                for key, entry in record["runs"].items()})
        pending["parts"].update({key: lease_entry(entry, entry["ts"]) for key, entry in record["parts"].items()})
        pending["leased"] += record["leased"]
        pending["sources"].update({key: source_entry(entry) for key, entry in record.get("sources", {}).items()})
        pending["next"] += 1
        if pending["next"] < of:
            return False  # taken in with the last chunk
        self._pending = None
        self.runs, self.parts, self.born = pending["runs"], pending["parts"], pending["born"]
        self.leased, self.sources = set(pending["leased"]), pending["sources"]
        return True
