"""The run report (docs/DESIGN.md §3, the report step): derived from the run manifest alone, written next
to it as report.md, with a summary a task log or a script can print."""
from __future__ import annotations

from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, Part
from kmigrate.run.cutover import course
from kmigrate.run.records import events, timeline
from kmigrate.run.checks import versions
from kmigrate.run.records.events import downtime_s
from kmigrate.run.targets import acls
from kmigrate.run.targets.prepare import topic_changes


# past this many partitions (or group offsets) a report lists only what a reader must look at: a table
# of 10,000 rows hides the one that differs; the manifest keeps every row
ROWS_MAX = 200

def _latest(manifest: Manifest, kind: str) -> dict[str, Any] | None:
    parts = [p for p in manifest.parts() if p.startswith(f"{kind}/")]
    return manifest.read(parts[-1]) if parts else None  # attempt names sort by time


def _covered(row: dict[str, Any]) -> tuple[int, int]:
    """(offsets of the partition's snapshot range verified equal, offsets in that range)."""
    low, end = row.get("source_log_start", 0), row.get("snapshot_end", 0)
    span = max(0, end - low)
    if not row.get("equal"):
        return 0, span
    ranges = [r[:2] for r in (row.get("verified_live"), row.get("verified_in_window")) if r] or [[low, end]]
    covered, reached = 0, low
    for start, stop in sorted(ranges):
        start, stop = max(start, reached), min(stop, end)
        if stop > start:
            covered, reached = covered + stop - start, stop
    return covered, span


def summarize(manifest: Manifest) -> dict[str, Any]:
    snapshot = manifest.read(Part.SNAPSHOT) or {"topics": {}, "groups": {}, "connectors": {}}
    copied: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():
        if part.startswith(f"{Part.COPY_RESULTS}/"):
            for row in manifest.read(part)["rows"]:
                key = (row["topic"], row["partition"])
                entry = copied.setdefault(key, {"records": 0, "bytes": 0, "fillers": 0, "markers": 0, "seconds": 0.0,
                                                "attempts": 0, "failed": 0, "ok": False})
                entry["attempts"] += not row.get("skipped")  # no Spark task: at its end already
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
    coverage = [_covered(r) for r in verified.values()]
    spans = sum(span for _, span in coverage)
    rounds = [manifest.read(p) for p in manifest.parts() if p.startswith(f"{Part.PRE_COPY_ROUNDS}/")]
    stopped, resumed_at = (manifest.read(Part.event(e)) for e in (events.STOPPED, events.RESUMED))
    plan = manifest.read(Part.PLAN) or {"units": []}
    return {
        "run_id": manifest.run_id,
        # the run's renames: {source name: target name} of the topics and groups it renamed
        "renamed_topics": {u["topic"]: u["target_topic"] for u in plan["units"] if "target_topic" in u},
        "renamed_groups": {g["group"]: g["target_group"] for g in groups if "target_group" in g},
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
        # source configs the target's Kafka version no longer knows, and what became of each
        "config_versions": (_latest(manifest, Part.CONFIG_VERSIONS) or {"topics": {}})["topics"],
        "downtime_s": downtime_s(manifest),
        "window": timeline.window(manifest, (stopped or {}).get("at"), (resumed_at or {}).get("at")),
        # the window's steps that failed before an attempt did them (the cutover task's retries)
        "window_retried": [{k: r[k] for k in ("step", "state", "failures", "errors")}
                           for r in course.outcomes(manifest, course.FAILOVER_STEPS) if r["failures"]],
        "pre_copy_rounds": [{k: r[k] for k in ("round", "records", "bytes", "seconds", "behind_after", "started")}
                            for r in rounds],
        # the share of the snapshot's offsets (log start to end) verified equal, while live or after the stop
        "verified_records_pct": round(100.0 * sum(c for c, _ in coverage) / spans, 3) if spans else
        (100.0 if verified and all(r["equal"] for r in verified.values()) else 0.0),
        "verified_live_partitions": sum(1 for r in verified.values() if r.get("verified_live")),
        "finished": resumed_at is not None,  # as events.finished: resumed on the target
        "stopped_at": (stopped or {}).get("at"),
        "resumed_at": (resumed_at or {}).get("at"),
        "drill": manifest.read(Part.DRILL),
        "unplanned_failover": manifest.read(Part.PROMOTED),
        **acls.summary(_latest(manifest, acls.PART)), "_acls": _latest(manifest, acls.PART),
        "source_kafka": snapshot.get("versions", {}).get("source_kafka"),
        "_copied": copied, "_verified": verified, "_groups": groups, "_connectors": connectors,
        "_resumed": resumed["connectors"],
        "_snapshot": snapshot,
    }


def _promoted_lines(promoted: dict[str, Any]) -> list[str]:
    """An unplanned failover's section: the DR cluster promoted as the mirror left it, and its RPO."""
    lines = ["## Unplanned failover", "",
             f"The DR cluster was promoted at {promoted['at']} ({promoted['seconds']} s after the failover began) "
             f"with what it held: {promoted['behind_records']} offsets the source had decided were not on it as of the "
             f"mirror's last status ({promoted['mirror_last_status']}), the oldest waiting at most "
             f"{promoted['behind_s_max']} s (the source may have written more before it went away). "
             f"{len(promoted['aborted'])} transactions the mirror left open on it were aborted.", "",
             "| partition | DR end | source end last seen | behind (offsets) | behind (s) |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['topic']}[{r['partition']}] | {r['dr_end']} | {r['source_end_last_seen']} | {r['behind_records']} "
              f"| {r['behind_s']} |" for r in promoted["partitions"]]
    lines += ["", *(f"- group {g['group']}: {g['partitions']} partitions on the DR cluster, {g['past_dr_end']} past "
                    "its DR end" for g in promoted["groups"])]
    kept = promoted.get("connectors")
    if kept:  # the mirror's last safe reading of the source's connectors, placed on the DR Connect cluster
        lines += [f"- connector {s['name']}: {s['state']} on the DR Connect cluster, from its offsets read at "
                  f"{kept['read_at']} (on the DR cluster at {kept['safe_at']}; a source connector writes again what "
                  "it wrote after that)" for s in kept["states"]]
    return lines + [""]


def _verified_state(row: dict[str, Any] | None) -> str:
    return "equal" if row and row["equal"] else ("; ".join(row["problems"]) if row else "not verified")


def _verified_when(row: dict[str, Any] | None) -> str:
    if not row or not row.get("equal"):
        return "-"
    live, window = row.get("verified_live"), row.get("verified_in_window")
    parts = [f"[{live[0]}, {live[1]}) while live"] if live else []
    if window:
        parts.append(f"[{window[0]}, {window[1]}) in the window")
    return (", ".join(parts) or "-") + (f" ({row['note']})" if row.get("note") else "")


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
                     "attempts": copied.get("attempts", 0), "verified": _verified_state(summary["_verified"].get(key)),
                     "verified_when": _verified_when(summary["_verified"].get(key))})
    totals = {field: sum(r[field] for r in rows) for field in ("records", "bytes", "fillers", "seconds")}
    return {"topic": topic, "target_topic": summary.get("renamed_topics", {}).get(topic, topic), "partitions": len(rows),
            "equal": sum(1 for r in rows if r["verified"] == "equal"), **totals, "rows": rows}


def _as(name: str, there: str | None) -> str:
    """A name in a report table: with its name on the target where the run renamed it."""
    return name if not there or there == name else f"{name} → {there}"


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
              "- Status: " + (f"finished: resumed on the target at {summary['resumed_at']} (run again, it changes "
                               "nothing)" if summary["finished"] else "not resumed on the target"),
              f"- Downtime (connectors stopped to resumed): {summary['downtime_s']} s",
              f"- Offsets verified equal: {summary['verified_records_pct']} % of the snapshot's "
              f"({summary['verified_live_partitions']} partitions up to their pre-copied end while the source was live)",
              f"- Snapshot taken at {snapshot.get('taken_at', '-')} from {snapshot.get('source', '-')}", ""]
    if summary["drill"]:
        d = summary["drill"]
        lines[-1:-1] = [f"- DR drill: RPO {d['rpo_records']} records / {d['rpo_seconds']} s behind the source at "
                        f"verification; RTO {d['rto_seconds']} s from trigger to verified"]
        if d.get("mirror_run"):  # a drill of a running mirror: its lag at the cut, its connectors failed over dry
            lines[-1:-1] = [f"- Drilled the mirror of run {d['mirror_run']}: RPO is its lag at the cut, which the DR "
                            f"cluster held {d['cut_waited_s']} s later; connectors placed stopped on the DR Connect "
                            "cluster with their offsets, then removed: "
                            + (", ".join(f"{c['name']} ({c['placed_s']} s)" for c in d["connectors"]) or "none")]
    if summary["unplanned_failover"]:
        lines += _promoted_lines(summary["unplanned_failover"])
    lines += ["## Versions and methods", "", *versions.report_lines(snapshot), ""]
    if summary["window"]:
        lines += ["## Cutover window", "", "Connectors stopped to resumed, step by step (the chart below shows the "
                  "whole run as a timeline):", "", "| step | seconds |", "| --- | --- |"]
        lines += [f"| {r['step']} | {r['seconds']:.2f} |" for r in summary["window"]]
        lines += [f"| **total** | **{summary['downtime_s']:.2f}** |", ""]
        lines += ["The quiesce samples the source while the connectors stop: those two rows overlap, and "
                  "\"between steps\" counts the window's seconds inside no step.", ""]
    for r in summary.get("window_retried", []):
        lines += [f"- **{r['step']}** failed {r['failures']} time{'s' if r['failures'] > 1 else ''} "
                  f"({'then done on a retry' if r['state'] == 'done' else 'and is not done'}): {r['errors'][-1]}"]
    if summary.get("window_retried"):
        lines.append("")
    if summary.get("timeline_chart"):
        lines += [f"![The run as a timeline]({summary['timeline_chart']})", ""]
    if summary["pre_copy_rounds"]:
        lines += ["## Pre-copy rounds", "", "While the source was live; each round copied up to the source's end when "
                  "it began.", "", "| round | started | records | bytes | seconds | source wrote meanwhile |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['round']} | {r['started']} | {r['records']} | {r['bytes']} | {r['seconds']:.2f} | "
                  f"{r['behind_after']} |" for r in summary["pre_copy_rounds"]]
        lines.append("")
    renamed_topics, renamed_groups = summary.get("renamed_topics") or {}, summary.get("renamed_groups") or {}
    if renamed_topics or renamed_groups:
        lines += ["## Renamed on the target", "",
                  f"{len(renamed_topics)} topics and {len(renamed_groups)} consumer groups have other names on the "
                  "target (source → target below); every record keeps its source offset, so each group's offsets "
                  "carry over to its new name as they are.", "", "| kind | source | target |", "| --- | --- | --- |"]
        lines += [f"| topic | {t} | {n} |" for t, n in sorted(renamed_topics.items())]
        lines += [f"| consumer group | {g} | {n} |" for g, n in sorted(renamed_groups.items())]
        lines.append("")
    lines += ["## Topics", "",
              "| topic | partitions | records copied | bytes | fillers | copy s (sum) | verified equal |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    outcomes = [_topic_outcome(summary, topic) for topic in sorted(snapshot["topics"])]
    for t in outcomes:
        lines.append(f"| {_as(t['topic'], t['target_topic'])} | {t['partitions']} | {t['records']} | {t['bytes']} | {t['fillers']} | "
                     f"{t['seconds']:.2f} | {t['equal']} of {t['partitions']} |")
    if summary.get("chart"):
        lines += ["", f"![Copy time per partition]({summary['chart']})"]
    listed = _listed(outcomes, summary["partitions"])
    lines += ["", "## Partitions", ""]
    if listed is not None:
        lines += [f"{summary['partitions']} partitions: a row each past {ROWS_MAX} is no report. Listed: those not "
                  f"verified equal ({sum(len(t['rows']) for t in listed)}); every partition's row is in the run "
                  "manifest's copy-results and verification parts.", ""]
    lines += ["| topic | partition | log start | end | records copied | bytes | fillers | copy s | attempts | verified | "
              "verified when |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in outcomes if listed is None else listed:
        for r in t["rows"]:
            lines.append(f"| {_as(t['topic'], t['target_topic'])} | {r['partition']} | {r['log_start']} | {r['end']} | {r['records']} | "
                         f"{r['bytes']} | {r['fillers']} | {r['seconds']:.2f} | {r['attempts']} | {r['verified']} | "
                         f"{r['verified_when']} |")
    lines += ["", "## Target topics", ""]
    if summary["topic_changes"]:
        lines += ["Changed on the source after the pre-copy, applied to the target topics this run created:", "",
                  "| topic | partitions | configs |", "| --- | --- | --- |"]
        for topic, change in sorted(summary["topic_changes"].items()):
            grown = f"{change['partitions'][0]} -> {change['partitions'][1]}" if change["partitions"] else "-"
            configs = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in change["configs"].items()) or "-"
            lines.append(f"| {topic} | {grown} | {configs} |")
        lines.append("")
    if summary["config_versions"]:
        lines += ["Source configs that the target's Kafka version removed:", "", "| topic | config | on the target |",
                  "| --- | --- | --- |"]
        for topic, changes in sorted(summary["config_versions"].items()):
            lines += [f"| {topic} | {name} | {text} |" for name, text in sorted(changes.items())]
        lines.append("")
    lines += ["Configs the copy set on the target topics, and their values after it (the source's):", "",
              "| topic | config | during the copy | now |", "| --- | --- | --- | --- |"]
    for topic, configs in sorted(summary["configs_restored"].items()):
        for name, (during, now) in configs.items():
            lines.append(f"| {topic} | {name} | {during} | {now} |")
    lines += ["", "## Consumer groups", ""]
    many = sum(len(g["offsets"]) for g in summary["_groups"]) > ROWS_MAX
    if many:
        lines += [f"A row a group and partition past {ROWS_MAX} is no report: each group's count, and the partitions "
                  "whose metadata differs.", "", "| group | partitions | metadata differs |", "| --- | --- | --- |"]
        lines += [f"| {g['group']} | {len(g['offsets'])} | "
                  f"{sum(1 for o in g['offsets'] if not o.get('metadata_equal', True))} |" for g in summary["_groups"]]
        lines.append("")
    lines += ["| group | partition | source offset | target offset | metadata | at the snapshot |",
              "| --- | --- | --- | --- | --- | --- |"]
    for group in summary["_groups"]:
        at_snapshot = group.get("state_at_snapshot") or "-"
        if group.get("members_at_snapshot"):
            at_snapshot += f" with {', '.join(group['members_at_snapshot'])}"
        for o in group["offsets"]:
            if many and o.get("metadata_equal", True):
                continue
            metadata = "-" if "metadata" not in o else (repr(o["metadata"]) if o["metadata_equal"] else "DIFFERS")
            lines.append(f"| {_as(group['group'], group.get('target_group'))} | "
                         f"{_as(o['topic'], o.get('target_topic'))}[{o['partition']}] | {o['source_offset']} | "
                         f"{o['target_offset']} | {metadata} | {at_snapshot} |")
    lines += ["", *acls.report_lines(summary["_acls"])]
    states = {c["name"]: c for c in (summary["_resumed"] or [])}
    lines += ["## Connectors", "", "| connector | type | offsets carried over | state on the source before | "
              "state on the target now |", "| --- | --- | --- | --- | --- |"]
    for c in summary["_connectors"]:
        now = states.get(c["name"], {}).get("state", "-")
        lines.append(f"| {c['name']} | {c['type']} | {len(c.get('offsets', []))} | {c.get('source_state') or '-'} | "
                     f"{now} |")
    return "\n".join(lines) + "\n"


def _listed(outcomes: list[dict[str, Any]], partitions: int) -> list[dict[str, Any]] | None:
    """The topics' outcomes with only the partitions a reader must look at (not verified equal), when
    the run has more than ROWS_MAX partitions; None (every row) otherwise."""
    if partitions <= ROWS_MAX:
        return None
    return [{**t, "rows": [r for r in t["rows"] if r["verified"] != "equal"]} for t in outcomes]


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


TIMELINE_FILE = "timeline.png"


def timeline_chart(manifest: Manifest, summary: dict[str, Any]) -> bytes | None:
    """A PNG of the run as a timeline: one lane per step (pre-copy rounds, live verification, the
    window's steps), each run of it a bar from its start to its end, the cutover window shaded."""
    import datetime
    runs = timeline.steps(manifest)
    if not runs:
        return None
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parse = datetime.datetime.fromisoformat
    origin = parse(runs[0]["started"])
    lanes: list[str] = []
    for r in runs:
        if r["step"] not in lanes:
            lanes.append(r["step"])
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.35 * len(lanes)))
    for r in runs:
        start = (parse(r["started"]) - origin).total_seconds()
        window_step = r["step"] in timeline.WINDOW_STEPS
        ax.broken_barh([(start, max(r["seconds"], 0.05))], (lanes.index(r["step"]) - 0.35, 0.7),
                       color="#c0504d" if window_step else "#2f6db5")
    if summary["stopped_at"]:
        end = parse(summary["resumed_at"] or runs[-1]["ended"])
        ax.axvspan((parse(summary["stopped_at"]) - origin).total_seconds(), (end - origin).total_seconds(),
                   color="#f2c0bf", alpha=0.5, zorder=0, label=f"cutover window: {summary['downtime_s'] or '-'} s")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds since {runs[0]['started']}")
    ax.set_title(f"Run {summary['run_id']}: pre-copy while live (blue), the cutover window (red)", fontsize=10)
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
    png = timeline_chart(manifest, summary)
    if png is not None:
        summary["timeline_chart"] = TIMELINE_FILE
        summary["timeline_chart_path"] = manifest.put_file(TIMELINE_FILE, png)
    path = manifest.put_file("report.md", render(summary).encode())
    return path, {k: v for k, v in summary.items() if not k.startswith("_")} | {"report": path}
