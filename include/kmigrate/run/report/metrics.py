"""The runs of a state location in Prometheus's text exposition format (docs/DESIGN.md §12, metrics
and alerts), served over HTTP for a Prometheus server to scrape: the mirrors while they run, and the
migrations, drills and failovers (`kmigrate_run_*`: phase, copy to go, steps, verification, RPO and
RTO) from their first step until a day (`run_retention_s`) after their last:

    python -m kmigrate.run.report.metrics --state-location /srv/kmigrate-state --port 9468

The metrics are read from the run manifests (each mirror's status part, replaced every status round;
its moves' records), not from the mirror's driver: the driver runs wherever its Spark job's client
runs, moves between hosts and restarts, while the state location is where every run writes. One
exporter at a fixed address serves every run there, and a driver that died is seen as what it is:
a heartbeat that grows old (`kmigrate_mirror_heartbeat_timestamp_seconds`), not a target gone.

Labels: `run` on every series; `topic` on the lag, split brain and verification series; `partition`
only for mirrors of at most `per_partition_max` partitions (PER_PARTITION_MAX by default), so that a
mirror of 10,000 partitions exposes one lag series a topic, not one a partition."""
from __future__ import annotations

import argparse
import datetime
import http.server
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate.run.report import progress

log = logging.getLogger(__name__)

PER_PARTITION_MAX = 100  # a mirror of more partitions than this is exposed by topic only
RUN_RETENTION_S = 86_400.0  # a run is served until this long after its last progress
RESTING_S = 3_600.0  # an abandoned run, or a folder that cannot be read, is read again this much later
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PORT = 9468


class Family:
    """One metric family: its HELP, TYPE and samples."""

    def __init__(self, name: str, kind: str, text: str) -> None:
        self.name, self.kind, self.text = name, kind, text
        self.samples: list[tuple[dict[str, str], float]] = []

    def add(self, labels: Mapping[str, Any], value: float) -> None:
        self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.text}", f"# TYPE {self.name} {self.kind}"]
        suffix = "_total" if self.kind == "counter" else ""
        lines += [f"{self.name}{suffix}{_labels(labels)} {_number(value)}" for labels, value in self.samples]
        return "\n".join(lines)


def families(runs: Iterable[tuple[str, Mapping[str, Any], Sequence[Mapping[str, Any]]]],
             per_partition_max: int = PER_PARTITION_MAX) -> list[Family]:
    """The families of each (run, its mirror status, its live verification rows)."""
    f = {name: Family(name, kind, text) for name, kind, text in [
        ("kmigrate_mirror_heartbeat_timestamp_seconds", "gauge", "When the mirror's last status round ended (epoch seconds)"),
        ("kmigrate_mirror_stopped", "gauge", "1 once the mirror stopped (asked to, or after a failover)"),
        ("kmigrate_mirror_status_round", "gauge", "The number of the mirror's last status round"),
        ("kmigrate_mirror_term", "gauge", "The mirror's copy term running"),
        ("kmigrate_mirror_lag_records", "gauge", "Records the DR cluster lacks of what the source decided, all partitions"),
        ("kmigrate_mirror_lag_seconds", "gauge", "How long the oldest record the DR cluster lacks has waited at most"),
        ("kmigrate_mirror_topic_lag_records", "gauge", "Records the DR cluster lacks, by topic"),
        ("kmigrate_mirror_topic_lag_seconds", "gauge", "How long the oldest record the DR cluster lacks has waited, by topic"),
        ("kmigrate_mirror_partition_lag_records", "gauge",
         f"Records the DR cluster lacks, by partition (mirrors of at most {per_partition_max} partitions)"),
        ("kmigrate_mirror_partitions", "gauge", "Partitions the mirror copies"),
        ("kmigrate_mirror_failing_partitions", "gauge", "Partitions whose last copy failed and that are behind"),
        ("kmigrate_mirror_records_copied", "counter", "Records the mirror's copies wrote"),
        ("kmigrate_mirror_offsets_mirrored", "counter", "Offsets the DR cluster's ends moved while mirrored"),
        ("kmigrate_mirror_failed_rounds", "counter", "Terms or status rounds that failed"),
        ("kmigrate_mirror_groups", "gauge", "The mirror's consumer groups by state: synced, skipped, error, moving, moved"),
        ("kmigrate_mirror_promoted_topics", "gauge", "Topics promoted on the DR cluster (copied no more)"),
        ("kmigrate_mirror_not_mirrored", "gauge",
         "Topics and consumer groups selected that the mirror leaves out, their names on the DR cluster refused, by kind"),
        ("kmigrate_mirror_split_brain_records", "gauge",
         "Records written on the source to a promoted topic since its promotion, by topic (never copied)"),
        ("kmigrate_mirror_verified_records", "gauge", "Records verified equal while live, by topic"),
        ("kmigrate_mirror_unequal_partitions", "gauge", "Partitions whose last live verification found a difference"),
    ]}
    for run, status, verified in runs:
        r = {"run": run}
        partitions = status.get("partitions", [])
        f["kmigrate_mirror_heartbeat_timestamp_seconds"].add(r, _epoch(status["heartbeat"]))
        f["kmigrate_mirror_stopped"].add(r, 1 if status.get("stopped") else 0)
        f["kmigrate_mirror_status_round"].add(r, status.get("round") or 0)
        f["kmigrate_mirror_term"].add(r, status.get("term") or 0)
        f["kmigrate_mirror_lag_records"].add(r, status.get("behind_records") or 0)
        f["kmigrate_mirror_lag_seconds"].add(r, status.get("behind_s_max") or 0)
        f["kmigrate_mirror_partitions"].add(r, len(partitions))
        f["kmigrate_mirror_failing_partitions"].add(r, status.get("failed_partitions") or 0)
        totals = status.get("totals", {})
        f["kmigrate_mirror_records_copied"].add(r, totals.get("records", 0))
        f["kmigrate_mirror_offsets_mirrored"].add(r, totals.get("offsets", 0))
        f["kmigrate_mirror_failed_rounds"].add(r, totals.get("failed_rounds", 0))
        by_topic: dict[str, list[float]] = {}
        for p in partitions:
            lag = by_topic.setdefault(p["topic"], [0, 0.0])
            lag[0] += p["behind_records"]
            lag[1] = max(lag[1], p["behind_s"] or 0.0)
            if len(partitions) <= per_partition_max:
                f["kmigrate_mirror_partition_lag_records"].add({**r, "topic": p["topic"], "partition": p["partition"]},
                                                               p["behind_records"])
        for topic, (records, seconds) in sorted(by_topic.items()):
            f["kmigrate_mirror_topic_lag_records"].add({**r, "topic": topic}, records)
            f["kmigrate_mirror_topic_lag_seconds"].add({**r, "topic": topic}, seconds)
        states: dict[str, int] = dict.fromkeys(("synced", "skipped", "error", "moving", "moved"), 0)
        for g in status.get("groups", []):
            state = g.get("moved") or ("skipped" if "skipped" in g else "error" if "error" in g else "synced")
            states[state] = states.get(state, 0) + 1
        for state, count in states.items():
            f["kmigrate_mirror_groups"].add({**r, "state": state}, count)
        promoted = status.get("promoted", [])
        f["kmigrate_mirror_promoted_topics"].add(r, len(promoted))
        left_out = status.get("not_mirrored") or {}
        for kind, rows in (("topic", "topics"), ("group", "groups")):
            f["kmigrate_mirror_not_mirrored"].add({**r, "kind": kind}, len(left_out.get(rows, {})))
        for row in promoted:
            f["kmigrate_mirror_split_brain_records"].add({**r, "topic": row["topic"]},
                                                         sum(s["records"] for s in row["split_brain"]))
        checked: dict[str, int] = {}
        for row in verified:
            checked[row["topic"]] = checked.get(row["topic"], 0) + row.get("records", 0)
        for topic, records in sorted(checked.items()):
            f["kmigrate_mirror_verified_records"].add({**r, "topic": topic}, records)
        f["kmigrate_mirror_unequal_partitions"].add(r, sum(1 for row in verified if not row.get("equal")))
    return list(f.values())


def run_families(runs: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Family]:
    """The families of each (run, its progress: kmigrate.run.report.progress.of_run)."""
    f = {name: Family(name, kind, text) for name, kind, text in [
        ("kmigrate_run_finished", "gauge", "1 once the run wrote its report"),
        ("kmigrate_run_progress_timestamp_seconds", "gauge",
         "When the run last recorded a step, an event or its copy's progress (epoch seconds)"),
        ("kmigrate_run_phase", "gauge", "1 for the step the run recorded last"),
        ("kmigrate_run_cutover_timestamp_seconds", "gauge", "When the run's window is scheduled (its cutover_at)"),
        ("kmigrate_run_step_seconds", "gauge", "How long each step took, its newest run"),
        ("kmigrate_run_downtime_seconds", "gauge", "From the connectors stopped on the source to resumed on the target"),
        ("kmigrate_run_copy_partitions", "gauge", "Partitions of the copy running or last run"),
        ("kmigrate_run_copy_partitions_to_go", "gauge", "Of those, the partitions the target does not hold to their end"),
        ("kmigrate_run_copy_offsets_to_go", "gauge", "Offsets the target still lacks of the copy's ends"),
        ("kmigrate_run_copy_offsets_per_second", "gauge", "The copy's pace since it began, in offsets a second"),
        ("kmigrate_run_verified_partitions", "gauge", "Partitions the run's last verification compared"),
        ("kmigrate_run_unequal_partitions", "gauge", "Partitions the run's last verification found different"),
        ("kmigrate_run_rpo_records", "gauge", "A drill's or failover's recovery point: records the target lacked"),
        ("kmigrate_run_rpo_seconds", "gauge", "A drill's or failover's recovery point: how old the oldest lacked record was"),
        ("kmigrate_run_rto_seconds", "gauge", "A drill's or unplanned failover's recovery time: trigger to verified or promoted"),
    ]}
    for run, p in runs:
        r = {"run": run}
        f["kmigrate_run_finished"].add(r, 1 if p["finished"] else 0)
        if p["progress_at"] is not None:
            f["kmigrate_run_progress_timestamp_seconds"].add(r, p["progress_at"])
        if p["phase"]:
            f["kmigrate_run_phase"].add({**r, "phase": p["phase"]}, 1)
        if p["cutover_at"] is not None:
            f["kmigrate_run_cutover_timestamp_seconds"].add(r, p["cutover_at"])
        for step, seconds in sorted(p["steps"].items()):
            f["kmigrate_run_step_seconds"].add({**r, "step": step}, seconds)
        if p["downtime_s"] is not None:
            f["kmigrate_run_downtime_seconds"].add(r, p["downtime_s"])
        for name, key in (("partitions", "partitions"), ("partitions_to_go", "partitions_to_go"),
                          ("offsets_to_go", "offsets_to_go"), ("offsets_per_second", "offsets_per_s")):
            if p["copy"]:
                f[f"kmigrate_run_copy_{name}"].add(r, p["copy"][key])
        if p["verification"]:
            f["kmigrate_run_verified_partitions"].add(r, p["verification"]["partitions"])
            f["kmigrate_run_unequal_partitions"].add(r, p["verification"]["unequal"])
        for name, value in (p["recovery"] or {}).items():
            f[f"kmigrate_run_{name}"].add(r, value)
    return list(f.values())


def render(fams: Iterable[Family]) -> str:
    return "\n".join(fam.render() for fam in fams) + "\n"


def run_folders(state_location: str) -> list[str]:
    """The names of the folders at `state_location` (each a run's, or something else), sorted."""
    import fsspec  # the manifest's own dependency: any location it takes

    fs, root = fsspec.core.url_to_fs(state_location)
    if not fs.exists(root):  # no run yet
        return []
    return sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(root, detail=False))


def read_runs(state_location: str, folders: Sequence[str] | None = None
              ) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(run, mirror status, live verification rows) of every run at `state_location` that has a mirror
    status; among `folders` when given (run_folders' listing, once for a scrape)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(state_location)
    out = []
    for run in run_folders(state_location) if folders is None else folders:
        if not fs.exists(f"{root.rstrip('/')}/{run}/{mirror_status.PART}.json"):
            continue
        manifest = Manifest(state_location, run)
        status = mirror_status.read(manifest)
        if status:
            out.append((run, status, (manifest.read(VERIFIED) or {}).get("rows", [])))
    return out


def read_progress(state_location: str, known: dict[str, dict[str, Any]], now: float | None = None,
                  retention_s: float = RUN_RETENTION_S, resting: dict[str, float] | None = None,
                  folders: Sequence[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(run, progress) of every run at `state_location` that progressed within `retention_s`. A
    finished run's progress is kept in `known` and not read again (its manifest no longer changes);
    a run that cannot be read is left out and logged (one half-written part does not hide the rest).
    With `resting`, a folder that is no run to serve (unreadable, or an unfinished run past the
    retention: abandoned) is not read again for RESTING_S (run -> when to read it again), so that
    many of them cost one listing a scrape. Among `folders` when given (run_folders' listing)."""
    now = time.time() if now is None else now
    resting = {} if resting is None else resting
    out = []
    for run in run_folders(state_location) if folders is None else folders:
        p = known.get(run)
        if p is None:
            if resting.get(run, 0.0) > now:
                continue
            try:
                p = progress.of_run(Manifest(state_location, run))
            except (KmigrateError, ValueError) as exc:  # not a run's folder, or a part not whole
                log.warning("run %s at %s is left out of the metrics for %.0f s: %s", run, state_location, RESTING_S,
                            exc)
                resting[run] = now + RESTING_S
                continue
            if p is not None and p["finished"]:
                known[run] = p
        if p is not None and (p["progress_at"] is None or p["progress_at"] >= now - retention_s):
            out.append((run, p))
        elif p is not None and not p["finished"]:
            resting[run] = now + RESTING_S
    return out


class Exporter:
    """An HTTP server answering GET /metrics with the mirrors of `state_location`, read at each scrape."""

    def __init__(self, state_location: str, port: int = PORT, host: str = "127.0.0.1",
                 per_partition_max: int = PER_PARTITION_MAX, run_retention_s: float = RUN_RETENTION_S) -> None:
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                try:
                    body = exporter.scrape().encode()
                except Exception as exc:  # noqa: BLE001 - a scrape that failed says why, and the next is tried
                    log.warning("scrape of %s failed: %s", state_location, exc)
                    self.send_error(500, f"reading the run manifests failed: {exc}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes are not logged one by one
                pass

        self.state_location, self.per_partition_max = state_location, per_partition_max
        self.run_retention_s = run_retention_s
        self.finished_runs: dict[str, dict[str, Any]] = {}  # read once: a finished run no longer changes
        self.resting_runs: dict[str, float] = {}  # abandoned runs and unreadable folders, read again hourly
        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread: threading.Thread | None = None

    def scrape(self) -> str:
        started = time.monotonic()
        folders = run_folders(self.state_location)  # listed once for the mirrors and the runs
        fams = [*families(read_runs(self.state_location, folders), self.per_partition_max),
                *run_families(read_progress(self.state_location, self.finished_runs, retention_s=self.run_retention_s,
                                            resting=self.resting_runs, folders=folders))]
        scrape = Family("kmigrate_exporter_scrape_seconds", "gauge", "How long reading the run manifests took")
        scrape.add({}, round(time.monotonic() - started, 6))
        return render([*fams, scrape])

    def start(self) -> Exporter:
        self.thread = threading.Thread(target=self.server.serve_forever, name="kmigrate-exporter", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), chr(92) + "n")}"'
               for k, v in labels.items())
    return "{" + ",".join(escaped) + "}"


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) and abs(value) < 2 ** 53 else repr(value)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kmigrate.run.report.metrics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="where the runs' manifests are")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this host only)")
    parser.add_argument("--per-partition-max", type=int, default=PER_PARTITION_MAX)
    parser.add_argument("--run-retention-h", type=float, default=RUN_RETENTION_S / 3600,
                        help="serve a run until this many hours after its last progress (default: %(default)g)")
    args = parser.parse_args(argv)
    exporter = Exporter(args.state_location, args.port, args.host, args.per_partition_max, args.run_retention_h * 3600)
    print(f"serving http://{args.host}:{exporter.port}/metrics for the runs of {args.state_location}", flush=True)
    exporter.server.serve_forever()


if __name__ == "__main__":
    main()
