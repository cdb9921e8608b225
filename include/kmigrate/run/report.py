"""The run report (docs/DESIGN.md §3, the report step): derived from the run manifest alone, written next
to it as report.md, with a summary a task log or a script can print."""
from __future__ import annotations

from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part
from kmigrate.run.events import downtime_s
from kmigrate.run.targets import topic_changes


def _latest(manifest: Manifest, kind: str) -> dict[str, Any] | None:
    parts = [p for p in manifest.parts() if p.startswith(f"{kind}/")]
    return manifest.read(parts[-1]) if parts else None  # attempt names sort by time


def summarize(manifest: Manifest) -> dict[str, Any]:
    snapshot = manifest.read(Part.SNAPSHOT) or {"topics": {}, "groups": {}, "connectors": {}}
    copied: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():
        if part.startswith(f"{Part.COPY_RESULTS}/"):
            for row in manifest.read(part)["rows"]:
                key = (row["topic"], row["partition"])
                entry = copied.setdefault(key, {"records": 0, "bytes": 0, "fillers": 0, "markers": 0, "seconds": 0.0,
                                                "attempts": 0, "failed": 0, "ok": False})
                entry["attempts"] += 1
                entry["failed"] += not row["ok"]
                entry["ok"] = row["ok"]
                if row["ok"]:
                    for field in ("records", "bytes", "fillers", "markers"):
                        entry[field] += row[field]
                    entry["seconds"] += row["copy_seconds"] + row["align_seconds"]
    verification = _latest(manifest, Part.VERIFICATION) or {"rows": []}
    verified = {(r["topic"], r["partition"]): r for r in verification["rows"]}
    replication = _latest(manifest, Part.GROUP_RESULTS) or {"groups": []}
    groups = replication["groups"]
    connectors = (_latest(manifest, Part.CONNECTOR_RESULTS) or {"connectors": []})["connectors"]
    resumed = manifest.read(Part.RESUMED) or {"connectors": []}
    partitions = sum(len(t["partitions"]) for t in snapshot["topics"].values())
    return {
        "run_id": manifest.run_id,
        "partitions": partitions,
        "partitions_equal": sum(1 for r in verified.values() if r["equal"]),
        "records": sum(c["records"] for c in copied.values()),
        "bytes": sum(c["bytes"] for c in copied.values()),
        "fillers": sum(c["fillers"] for c in copied.values()),
        "groups": len(snapshot["groups"]),
        # offsets and their metadata equal on the target (a migration also checked the group stayed
        # stopped on the source; a drill copies it as of its snapshot)
        "groups_exact": sum(1 for g in groups if all(o.get("metadata_equal", True) for o in g["offsets"])),
        "groups_as_of_snapshot": bool(replication.get("as_of_snapshot")),
        "connectors": len(snapshot["connectors"]),
        # left on the target in the state each had on the source before the run
        "connectors_resumed": sum(1 for c in resumed["connectors"] if c["state"] == c.get("wanted", "RUNNING")),
        "topic_changes": topic_changes(manifest),
        "configs_restored": (_latest(manifest, Part.TOPIC_CONFIGS) or {"topics": {}})["topics"],
        "downtime_s": downtime_s(manifest),
        "drill": manifest.read(Part.DRILL),
        "_copied": copied, "_verified": verified, "_groups": groups, "_connectors": connectors,
        "_resumed": resumed["connectors"],
        "_snapshot": snapshot,
    }


def _verified_state(row: dict[str, Any] | None) -> str:
    return "equal" if row and row["equal"] else ("; ".join(row["problems"]) if row else "not verified")


def topic_result(manifest: Manifest, topic: str) -> dict[str, Any]:
    """One topic of the run: per partition what was copied and whether it verified equal (the
    DAG's per-topic tasks log this, so that the grid shows each topic's outcome)."""
    summary = summarize(manifest)
    if topic not in summary["_snapshot"]["topics"]:
        raise ConfigError(f"topic {topic!r} is not in the snapshot of run {manifest.run_id}")
    return _topic_outcome(summary, topic)


def _topic_outcome(summary: dict[str, Any], topic: str) -> dict[str, Any]:
    """A topic's partitions (snapshot offsets, what all copy attempts wrote, the verification)
    and their totals: the topic and partition tables of the report and `topic_result`."""
    rows = []
    for p in summary["_snapshot"]["topics"][topic]["partitions"]:
        key = (topic, p["partition"])
        copied = summary["_copied"].get(key, {})
        rows.append({"partition": p["partition"], "log_start": p["log_start"], "end": p["end"],
                     "records": copied.get("records", 0), "bytes": copied.get("bytes", 0),
                     "fillers": copied.get("fillers", 0), "seconds": copied.get("seconds", 0.0),
                     "attempts": copied.get("attempts", 0), "verified": _verified_state(summary["_verified"].get(key))})
    totals = {field: sum(r[field] for r in rows) for field in ("records", "bytes", "fillers", "seconds")}
    return {"topic": topic, "partitions": len(rows), "equal": sum(1 for r in rows if r["verified"] == "equal"),
            **totals, "rows": rows}


def render(summary: dict[str, Any]) -> str:
    snapshot = summary["_snapshot"]
    lines = [f"# Migration report: {summary['run_id']}", ""]
    lines += [f"- Partitions verified equal: **{summary['partitions_equal']} of {summary['partitions']}**",
              f"- Records copied: {summary['records']} ({summary['bytes']} bytes), fillers: {summary['fillers']}",
              f"- Consumer groups replicated exactly (offsets and metadata): {summary['groups_exact']} of "
              f"{summary['groups']}" + (" (as of the snapshot: a drill leaves the source live)"
                                        if summary["groups_as_of_snapshot"] else ""),
              f"- Connectors left in their source state on the target: {summary['connectors_resumed']} of "
              f"{summary['connectors']}",
              f"- Downtime (connectors stopped to resumed): {summary['downtime_s']} s",
              f"- Snapshot taken at {snapshot.get('taken_at', '-')} from {snapshot.get('source', '-')}", ""]
    if summary["drill"]:
        d = summary["drill"]
        lines[-1:-1] = [f"- DR drill: RPO {d['rpo_records']} records / {d['rpo_seconds']} s behind the source at "
                        f"verification; RTO {d['rto_seconds']} s from trigger to verified"]
    lines += ["## Topics", "",
              "| topic | partitions | records copied | bytes | fillers | copy s (sum) | verified equal |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    outcomes = [_topic_outcome(summary, topic) for topic in sorted(snapshot["topics"])]
    for t in outcomes:
        lines.append(f"| {t['topic']} | {t['partitions']} | {t['records']} | {t['bytes']} | {t['fillers']} | "
                     f"{t['seconds']:.2f} | {t['equal']} of {t['partitions']} |")
    if summary.get("chart"):
        lines += ["", f"![Copy time per partition]({summary['chart']})"]
    lines += ["", "## Partitions", "",
              "| topic | partition | log start | end | records copied | bytes | fillers | copy s | attempts | verified |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in outcomes:
        for r in t["rows"]:
            lines.append(f"| {t['topic']} | {r['partition']} | {r['log_start']} | {r['end']} | {r['records']} | "
                         f"{r['bytes']} | {r['fillers']} | {r['seconds']:.2f} | {r['attempts']} | {r['verified']} |")
    lines += ["", "## Target topics", ""]
    if summary["topic_changes"]:
        lines += ["Changed on the source after the pre-copy, applied to the target topics this run created:", "",
                  "| topic | partitions | configs |", "| --- | --- | --- |"]
        for topic, change in sorted(summary["topic_changes"].items()):
            grown = f"{change['partitions'][0]} -> {change['partitions'][1]}" if change["partitions"] else "-"
            configs = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in change["configs"].items()) or "-"
            lines.append(f"| {topic} | {grown} | {configs} |")
        lines.append("")
    lines += ["Configs the copy set on the target topics, and their values after it (the source's):", "",
              "| topic | config | during the copy | now |", "| --- | --- | --- | --- |"]
    for topic, configs in sorted(summary["configs_restored"].items()):
        for name, (during, now) in configs.items():
            lines.append(f"| {topic} | {name} | {during} | {now} |")
    lines += ["", "## Consumer groups", "",
              "| group | partition | source offset | target offset | metadata | at the snapshot |",
              "| --- | --- | --- | --- | --- | --- |"]
    for group in summary["_groups"]:
        at_snapshot = group.get("state_at_snapshot") or "-"
        if group.get("members_at_snapshot"):
            at_snapshot += f" with {', '.join(group['members_at_snapshot'])}"
        for o in group["offsets"]:
            metadata = "-" if "metadata" not in o else (repr(o["metadata"]) if o["metadata_equal"] else "DIFFERS")
            lines.append(f"| {group['group']} | {o['topic']}[{o['partition']}] | {o['source_offset']} | "
                         f"{o['target_offset']} | {metadata} | {at_snapshot} |")
    states = {c["name"]: c for c in (summary["_resumed"] or [])}
    lines += ["", "## Connectors", "", "| connector | type | offsets carried over | state on the source before | "
              "state on the target now |", "| --- | --- | --- | --- | --- |"]
    for c in summary["_connectors"]:
        now = states.get(c["name"], {}).get("state", "-")
        lines.append(f"| {c['name']} | {c['type']} | {len(c.get('offsets', []))} | {c.get('source_state') or '-'} | "
                     f"{now} |")
    return "\n".join(lines) + "\n"


CHART_FILE = "copy-times.png"
CHART_MAX_BARS = 60


def copy_chart(summary: dict[str, Any]) -> bytes | None:
    """A PNG bar chart of the copy time of each partition (its pre-copy, copy and retries summed),
    the slowest CHART_MAX_BARS when there are more; None when nothing was copied."""
    times = sorted(((entry["seconds"], f"{topic}[{partition}]", entry["failed"])
                    for (topic, partition), entry in summary["_copied"].items()), reverse=True)
    if not times:
        return None
    import io

    import matplotlib  # imported here: the DAG files import this module and must parse fast
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = times[:CHART_MAX_BARS]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.22 * len(shown)))
    ax.barh([label for _, label, _ in shown][::-1], [s for s, _, _ in shown][::-1],
            color=["#c0504d" if failed else "#2f6db5" for _, _, failed in shown][::-1])
    ax.set_xlabel("seconds copying, pre-copy and copy summed (red: an attempt failed)")
    title = f"Copy time per partition, run {summary['run_id']}"
    if len(times) > len(shown):
        title += f" (slowest {len(shown)} of {len(times)})"
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()


def write_report(manifest: Manifest) -> tuple[str, dict[str, Any]]:
    """Write report.md and its chart (copy-times.png) into the run's folder; returns the report's
    path and the public summary."""
    summary = summarize(manifest)
    png = copy_chart(summary)
    if png is not None:
        summary["chart"] = CHART_FILE
        summary["chart_path"] = manifest.put_file(CHART_FILE, png)
    path = manifest.put_file("report.md", render(summary).encode())
    return path, {k: v for k, v in summary.items() if not k.startswith("_")} | {"report": path}
