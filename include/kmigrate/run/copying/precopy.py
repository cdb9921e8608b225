"""The pre-copy while the source is live (docs/DESIGN.md §3.1): copy rounds that converge on the
source's end, then the pre-copied ranges verified, so that the cutover window only copies and
verifies what was written since the last round."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.model import PRESERVE, WorkUnit
from kmigrate.run.records import timeline


def compacted_topics(cluster: ClusterConfig, topics: Iterable[str]) -> frozenset[str]:
    """The topics whose cleanup policy includes compaction (their own or the broker's default)."""
    with ClusterAdmin(cluster) as admin:
        configs = admin.topics_configs(sorted(set(topics)))
    return frozenset(t for t, c in configs.items() if "compact" in c.get("cleanup.policy", ""))


def pre_copy_rounds(manifest: Manifest, source: ClusterConfig, units: Sequence[WorkUnit],
                    copy_round: Callable[[Sequence[WorkUnit]], list[dict[str, Any]]],
                    verify_round: Callable[[Sequence[WorkUnit], Mapping], list[dict[str, Any]]] | None = None, *,
                    max_rounds: int, converged_records: int,
                    say: Callable[[str], None] = print) -> tuple[list[WorkUnit], list[dict]]:
    """Copy `units`, then again up to the source's new last stable offsets while more than `converged_records`
    offsets were written during the round, at most `max_rounds` rounds this time (numbered on from the
    run's earlier rounds: a retry, a catch-up round); each round resumes
    from the target's end. With `verify_round(units, previous rows)`, each round then verifies what
    it copied of the preserve-mode partitions while the source is live (part
    live-verification/<attempt>, each row covering the partition's verified range so far), so that
    the window reads again only what came after the last round. Each round is recorded (part
    pre-copy-rounds/<attempt>, and the timeline). Returns the last round's units and its failed
    rows (the rounds stop at a failure)."""
    failed: list[dict[str, Any]] = []
    previous = live_rows(manifest)
    before = sum(1 for part in manifest.parts() if part.startswith(f"{Part.PRE_COPY_ROUNDS}/"))
    for number in range(before + 1, before + max(1, max_rounds) + 1):
        started = time.time()
        rows = copy_round(units)
        ended = time.time()
        failed = [r for r in rows if not r["ok"]]
        timeline.record(manifest, "pre_copy_round", started, ended, round=number)
        verified = None
        if verify_round is not None and not failed:
            checked = time.time()
            verified = verify_round([u for u in units if u.mode == PRESERVE], previous)
            manifest.write_once(Part.attempt(Part.LIVE_VERIFICATION), {
                "round": number, "rows": verified, "seconds": round(time.time() - checked, 3)})
            timeline.record(manifest, "live_verify", checked, round=number)
            previous = {(r["topic"], r["partition"]): r for r in verified}
        with ClusterAdmin(source) as admin:  # the next round ends where the source is stable
            ends = admin.stable_ends(((u.topic, u.partition) for u in units), retry=True)
        behind = sum(max(0, ends[(u.topic, u.partition)] - u.end_offset) for u in units)
        copied = sum(r["records"] for r in rows if r["ok"])
        manifest.write_once(Part.attempt(Part.PRE_COPY_ROUNDS), {
            "round": number, "started": timeline.iso(started), "ended": timeline.iso(time.time()),
            "seconds": round(time.time() - started, 3), "copy_seconds": round(ended - started, 3),
            "partitions": len(units), "planned_end": sum(u.end_offset for u in units), "records": copied,
            "bytes": sum(r["bytes"] for r in rows if r["ok"]),
            "failed": len(failed), "behind_after": behind,
            "verified_equal": None if verified is None else sum(1 for r in verified if r["equal"]),
            "verified": None if verified is None else len(verified)})
        say(f"pre-copy round {number}: {copied:,} records copied in {ended - started:.1f}s"
            + ("" if verified is None else f", {sum(1 for r in verified if r['equal'])} of {len(verified)} partitions "
               f"verified equal in {time.time() - ended:.1f}s")
            + f"; the source wrote {behind:,} offsets meanwhile")
        if failed or behind <= converged_records or number >= before + max_rounds:
            return list(units), failed
        units = [dataclasses.replace(u, end_offset=ends[(u.topic, u.partition)]) for u in units]
    return list(units), failed


def live_rows(manifest: Manifest) -> dict[tuple[str, int], dict[str, Any]]:
    """The newest live-verification row of each partition (one that found a problem too: the window
    then verifies that partition in full)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():  # attempt names sort by time
        if part.startswith(f"{Part.LIVE_VERIFICATION}/"):
            for row in manifest.read(part)["rows"]:
                out[(row["topic"], row["partition"])] = row
    return out
