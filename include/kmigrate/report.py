"""The run report (DESIGN 3, the report step): derived from the run manifest alone, written next
to it as report.md, with a summary a task log or a script can print."""
from __future__ import annotations

from typing import Any

from kmigrate.manifest import Manifest
from kmigrate.pipeline import downtime_s


def _latest(manifest: Manifest, kind: str) -> dict[str, Any] | None:
    parts = [p for p in manifest.parts() if p.startswith(f"{kind}/")]
    return manifest.read(parts[-1]) if parts else None  # attempt names sort by time


def summarize(manifest: Manifest) -> dict[str, Any]:
    snapshot = manifest.read("snapshot") or {"topics": {}, "groups": {}, "connectors": {}}
    copied: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():
        if part.startswith("copy-results/"):
            for row in manifest.read(part)["rows"]:
                key = (row["topic"], row["partition"])
                entry = copied.setdefault(key, {"records": 0, "bytes": 0, "fillers": 0, "markers": 0, "seconds": 0.0,
                                                "attempts": 0, "ok": False})
                entry["attempts"] += 1
                entry["ok"] = row["ok"]
                if row["ok"]:
                    for field in ("records", "bytes", "fillers", "markers"):
                        entry[field] += row[field]
                    entry["seconds"] += row["copy_seconds"] + row["align_seconds"]
    verification = _latest(manifest, "verification") or {"rows": []}
    verified = {(r["topic"], r["partition"]): r for r in verification["rows"]}
    groups = (_latest(manifest, "group-replication") or {"groups": []})["groups"]
    connectors = (_latest(manifest, "connector-migration") or {"connectors": []})["connectors"]
    resumed = manifest.read("resumed-connectors") or {"connectors": []}
    partitions = sum(len(t["partitions"]) for t in snapshot["topics"].values())
    return {
        "run_id": manifest.run_id,
        "partitions": partitions,
        "partitions_equal": sum(1 for r in verified.values() if r["equal"]),
        "records": sum(c["records"] for c in copied.values()),
        "bytes": sum(c["bytes"] for c in copied.values()),
        "fillers": sum(c["fillers"] for c in copied.values()),
        "groups": len(snapshot["groups"]),
        "groups_exact": len(groups),
        "connectors": len(snapshot["connectors"]),
        "connectors_resumed": sum(1 for c in resumed["connectors"] if c["state"] == "RUNNING"),
        "downtime_s": downtime_s(manifest),
        "drill": manifest.read("drill"),
        "_copied": copied, "_verified": verified, "_groups": groups, "_connectors": connectors,
        "_snapshot": snapshot,
    }


def render(summary: dict[str, Any]) -> str:
    snapshot, copied, verified = summary["_snapshot"], summary["_copied"], summary["_verified"]
    lines = [f"# Migration report: {summary['run_id']}", ""]
    lines += [f"- Partitions verified equal: **{summary['partitions_equal']} of {summary['partitions']}**",
              f"- Records copied: {summary['records']} ({summary['bytes']} bytes), fillers: {summary['fillers']}",
              f"- Consumer groups replicated exactly: {summary['groups_exact']} of {summary['groups']}",
              f"- Connectors resumed on the target: {summary['connectors_resumed']} of {summary['connectors']}",
              f"- Downtime (connectors stopped to resumed): {summary['downtime_s']} s",
              f"- Snapshot taken at {snapshot.get('taken_at', '-')} from {snapshot.get('source', '-')}", ""]
    if summary["drill"]:
        d = summary["drill"]
        lines[-1:-1] = [f"- DR drill: RPO {d['rpo_records']} records / {d['rpo_seconds']} s behind the source at "
                        f"verification; RTO {d['rto_seconds']} s from trigger to verified"]
    lines += ["## Partitions", "",
              "| topic | partition | log start | end | records copied | bytes | fillers | copy s | attempts | verified |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for topic, entry in sorted(snapshot["topics"].items()):
        for p in entry["partitions"]:
            key = (topic, p["partition"])
            c = copied.get(key, {})
            v = verified.get(key)
            state = "equal" if v and v["equal"] else ("; ".join(v["problems"]) if v else "not verified")
            lines.append(f"| {topic} | {p['partition']} | {p['log_start']} | {p['end']} | {c.get('records', 0)} | "
                         f"{c.get('bytes', 0)} | {c.get('fillers', 0)} | {c.get('seconds', 0.0):.2f} | "
                         f"{c.get('attempts', 0)} | {state} |")
    lines += ["", "## Consumer groups", "", "| group | partition | source offset | target offset |", "| --- | --- | --- | --- |"]
    for group in summary["_groups"]:
        for o in group["offsets"]:
            lines.append(f"| {group['group']} | {o['topic']}[{o['partition']}] | {o['source_offset']} | {o['target_offset']} |")
    lines += ["", "## Connectors", "", "| connector | type | offsets carried over |", "| --- | --- | --- |"]
    for c in summary["_connectors"]:
        lines.append(f"| {c['name']} | {c['type']} | {len(c.get('offsets', []))} |")
    return "\n".join(lines) + "\n"


def write_report(manifest: Manifest) -> tuple[str, dict[str, Any]]:
    """Write report.md into the run's folder; returns its path and the public summary."""
    summary = summarize(manifest)
    path = manifest.put_file("report.md", render(summary).encode())
    return path, {k: v for k, v in summary.items() if not k.startswith("_")} | {"report": path}
