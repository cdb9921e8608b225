"""The board of a migration done one application at a time on a mirror (docs/DESIGN.md §12, moving applications one at a time): one view
of every mirrored topic, consumer group and connector of the run, and where each stands: mirrored,
moved (or moving, or moved back), promoted, with each move's window and the mirror's lag. Read from
the run manifest only (the mirror's status and the moves' records); `write_board` puts it in the
run's folder as board.md, and each move's task writes it again when the move ends."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.records import moves as moved


def board(manifest: Manifest) -> dict[str, Any]:
    """{"topics", "groups", "connectors": rows, "lag": the mirror's, "round", "heartbeat"}."""
    status = mirror_status.read(manifest) or {}
    promotions = moved.promotions(manifest)
    topics: dict[str, dict[str, Any]] = {}
    for p in status.get("partitions", []):
        row = topics.setdefault(p["topic"], {"topic": p["topic"], "state": "mirrored", "partitions": 0,
                                             "behind_records": 0, "behind_s": 0.0})
        row["partitions"] += 1
        row["behind_records"] += p["behind_records"]
        row["behind_s"] = max(row["behind_s"], p["behind_s"] or 0.0)
    for topic, record in promotions.items():
        row = topics.setdefault(topic, {"topic": topic, "partitions": len(record.get("ends", {})),
                                        "behind_records": 0, "behind_s": 0.0})
        row["state"] = ("promoted" if record.get("ended") else "promoting") if record["state"] == moved.IS_PROMOTED \
            else "promoting"
        row["window_s"] = record.get("window_s")
        row["at"] = record.get("ended") or record.get("began")
    split = {r["topic"]: sum(s["records"] for s in r["split_brain"]) for r in status.get("promoted", []) if r["split_brain"]}
    for topic, records in split.items():
        topics[topic]["split_brain_records"] = records
    groups = {}
    for row in status.get("groups", []):
        if "moved" not in row:
            groups[row["group"]] = {"group": row["group"], "state": "skipped" if "skipped" in row else "synced",
                                    "note": row.get("skipped") or row.get("error")}
    for group, record in moved.records_of(manifest, moved.MOVED, "group").items():  # moved back ones too
        groups[group] = {"group": group, "state": record["state"], "window_s": record.get("window_s"),
                         "at": record.get("back_at") or record.get("ended") or record.get("began")}
    connectors = {name: {"connector": name, "type": record["type"], "state": record["state"],
                         "state_before": record["state_before"], "at": record.get("ended") or record.get("began")}
                  for name, record in moved.records_of(manifest, moved.CONNECTORS_MOVED, "connector").items()}
    return {"run": manifest.run_id, "round": status.get("round"), "heartbeat": status.get("heartbeat"),
            "stopped": status.get("stopped"), "behind_records": status.get("behind_records"),
            "behind_s_max": status.get("behind_s_max"),
            "topics": [topics[t] for t in sorted(topics)], "groups": [groups[g] for g in sorted(groups)],
            "connectors": [connectors[c] for c in sorted(connectors)]}


def left(b: Mapping[str, Any]) -> list[str]:
    """What still runs on the source, by the board `b`: topics not promoted, groups and connectors
    not moved (a group moved back, or one the mirror skips, counts: its application is on the source;
    a moved sink connector's group, `connect-<name>`, moved with it)."""
    sinks = {f"connect-{c['connector']}" for c in b["connectors"] if c["type"] == "sink" and c["state"] == "moved"}
    return ([f"topic {t['topic']} ({t['state']})" for t in b["topics"] if t["state"] != "promoted"]
            + [f"group {g['group']} ({g['state']})" for g in b["groups"] if g["state"] != "moved"
               and g["group"] not in sinks]
            + [f"connector {c['connector']} ({c['state']})" for c in b["connectors"] if c["state"] != "moved"])


def render(b: Mapping[str, Any]) -> str:
    """The board as Markdown."""
    moved_topics = sum(1 for t in b["topics"] if t["state"] == "promoted")
    moved_groups = sum(1 for g in b["groups"] if g["state"] == "moved")
    rest = left(b)
    lines = [f"# Moves of run {b['run']}", "",
             f"- Topics promoted on the DR cluster: **{moved_topics} of {len(b['topics'])}**",
             f"- Consumer groups moved: **{moved_groups} of {len(b['groups'])}**",
             f"- Connectors moved: {sum(1 for c in b['connectors'] if c['state'] == 'moved')}",
             f"- The mirror: status {b['round']} at {b['heartbeat']}"
             + (" (stopped)" if b["stopped"] else "")
             + f", {b['behind_records'] or 0} records behind, the oldest waiting at most {b['behind_s_max'] or 0} s",
             f"- Still on the source: {len(rest)}" if rest else
             "- Nothing left on the source: the last move ends the mirror and releases its claims", "",
             "## Topics", "", "| topic | partitions | state | behind (records) | move window (s) | at | split brain |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {t['topic']} | {t['partitions']} | {t['state']} | {t['behind_records']} | {_or(t.get('window_s'))} "
              f"| {_or(t.get('at'))} | {_split(t)} |" for t in b["topics"]]
    lines += ["", "## Consumer groups", "", "| group | state | move window (s) | at | note |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {g['group']} | {g['state']} | {_or(g.get('window_s'))} | {_or(g.get('at'))} | {_or(g.get('note'))} |"
              for g in b["groups"]]
    if b["connectors"]:
        lines += ["", "## Connectors", "", "| connector | type | state | on the source before | at |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {c['connector']} | {c['type']} | {c['state']} | {c['state_before']} | {_or(c.get('at'))} |"
                  for c in b["connectors"]]
    return "\n".join(lines) + "\n"


def write_board(manifest: Manifest) -> str:
    """board.md written into the run's folder; its location."""
    return manifest.put_file("board.md", render(board(manifest)).encode())


def _or(value: Any) -> str:
    return "" if value is None else str(value)


def _split(row: Mapping[str, Any]) -> str:
    records = row.get("split_brain_records")
    return f"**{records} records written on the source since**" if records else ""
