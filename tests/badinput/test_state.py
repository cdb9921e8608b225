"""Bad state (issue 33): run names fsspec or the file system would misread, state locations that are
not a folder or an object store, state folders others may write, manifest parts a crash left cut
short, and records in the claims topic that are not claims. Each is refused with a ManifestError
naming it and the way out before anything is written; a record that is not a claim is skipped with
one warning, and claims go on."""
from __future__ import annotations

import http.server
import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kmigrate.claims.log import CLAIMS_TOPIC, ClaimLog, claim_log
from kmigrate.claims.runs import check_topics_free, claim_topics, release_topics
from kmigrate.errors import TopicsHeld
from kmigrate.manifest import Manifest, Part
from kmigrate.run.records import events
from kmigrate.run.records.snapshot import read_snapshot

from tests.support.airflow import run_dag
from tests.support.badinput import nothing_at, refused, refused_by_dag, survived

PROJECT_DIR = Path(__file__).resolve().parents[2]


def files_under(path: Path):
    """`written` for a case whose state already holds files: anything there that was not before."""
    before = {str(p): p.stat().st_size for p in path.rglob("*")}
    return lambda: [p for p, size in {str(q): q.stat().st_size for q in path.rglob("*")}.items()
                    if before.get(p) != size]


def test_run_names_that_name_another_run_or_no_file(dagbag, tmp_path):
    state = tmp_path / "state"
    # the trigger form's schema refuses it before a run exists (its pattern is the library's rule)
    refused("run name with ::", lambda: run_dag(dagbag, topics_include="x", run_name="x::memory",
                                                state_location=str(state)),
            "run_name", "x::memory", written=nothing_at(state))
    refused("run name too long", lambda: Manifest(str(state), "r" * 300), "run name", "300 characters",
            "1 to 200", written=nothing_at(state))


class _Counting(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - the handler's protocol
        self.requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_PUT = do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


def test_state_locations_that_are_no_folder_nor_object_store(stack, dagbag, tmp_path, capfd):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        location = f"http://127.0.0.1:{server.server_address[1]}/state"
        # the trigger form refuses it (its schema states the library's rule), the library again for a caller
        # that bypasses the form; before the fix the preflight fetched bad/params.json from this server
        refused("form: state location http", lambda: run_dag(dagbag, topics_include="anything",
                                                              state_location=location, run_name="bad"),
                "state_location", location, written=lambda: list(_Counting.requests))
        refused("state location http", lambda: Manifest(location, "bad").read(Part.PARAMS), location, "is refused",
                "absolute local path", "s3://", written=lambda: list(_Counting.requests))
    finally:
        server.shutdown()
        server.server_close()
    chain = f"simplecache::file://{tmp_path}/state"
    refused("state location fsspec chain", lambda: Manifest(chain, "run-1").write_once(Part.SNAPSHOT, {"a": 1}),
            chain, "chain", "'::'", written=nothing_at(tmp_path / "state"))


def test_state_folders_that_others_may_write(stack, dagbag, tmp_path, capfd):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)  # as /tmp/kmigrate-state pre-created by anyone
    run = run_dag(dagbag, topics_include="anything", state_location=str(state), run_name="bad")
    captured = capfd.readouterr()
    refused_by_dag("state folder writable by others", run, captured.out + captured.err, f"state folder {state}",
                   "0777", "chmod 700", "another state_location", written=nothing_at(state / "bad"))
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    refused("state folder owned by another user",
            lambda: Manifest(str(theirs), "run-1").write_once(Part.SNAPSHOT, {"a": 1}),
            f"state folder {theirs}", "uid 65534", "chown", written=nothing_at(theirs / "run-1"))


def _run_with(state: Path, run: str, part: str, content: bytes) -> Manifest:
    """A run's manifest with `part` holding `content`, as a power loss leaves it."""
    manifest = Manifest(str(state), run)
    manifest.write_once(Part.event(events.STOPPED), {"at": "2026-11-25T16:00:00.000+00:00"})
    path = state / run / f"{part}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return manifest


def test_manifest_parts_a_crash_left_cut_short(stack, dagbag, tmp_path, capfd):
    state = tmp_path / "state"
    manifest = _run_with(state, "cut", Part.SNAPSHOT, b'{"topics": {"orders": {"partitions": [{"end"')
    refused("truncated manifest part", lambda: read_snapshot(manifest), "'snapshot'", "not whole",
            str(state / "cut" / "snapshot.json"), "cut short", "Delete", written=files_under(state))
    # an empty events/connectors-resumed.json made a re-run believe the run finished
    manifest = _run_with(state, "empty", Part.event(events.RESUMED), b"")
    refused("empty manifest part", lambda: events.finished(manifest), "connectors-resumed.json", "is empty",
            "not whole", "Delete", written=files_under(state))
    # through the DAG: a run triggered again whose recorded params part is empty
    _run_with(state, "again", Part.PARAMS, b"")
    written = files_under(state)
    run = run_dag(dagbag, topics_include="anything", state_location=str(state), run_name="again")
    captured = capfd.readouterr()
    refused_by_dag("empty manifest part (a run triggered again)", run, captured.out + captured.err,
                   "params.json", "not whole", "Delete", written=written)


@pytest.mark.parametrize("kind, value", [
    ("claims record null", None),
    ("claims record not json", b"\xffnot a claim {"),
    ("claims record json but not an object", b'["not", "a", "claim"]'),
])
def test_records_in_the_claims_topic_that_are_not_claims(stack, caplog, kind, value):
    claim_log(stack.target).submit({"kind": "from-a-later-version"})  # the claims topic exists from here on
    producer = Producer(stack.target.producer(acks="all"))
    offsets = []
    producer.produce(CLAIMS_TOPIC, key=b"badinput", value=value, partition=0,
                     on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else err))
    assert producer.flush(30) == 0 and isinstance(offsets[0], int), offsets
    run, topic = f"badclaims-{uuid.uuid4().hex[:8]}", f"badclaims-{uuid.uuid4().hex[:8]}"

    def claims_go_on():
        fresh = ClaimLog(stack.target)  # reads the whole log from its start, as a new process does
        try:
            assert run not in fresh.current().runs
        finally:
            fresh.close()
        claim_topics(stack.target, run, [topic], dag="badinput")
        with pytest.raises(TopicsHeld, match=run):
            check_topics_free(stack.target, f"other-{run}", [topic])
        assert release_topics(stack.target, run)
        check_topics_free(stack.target, f"other-{run}", [topic])

    with caplog.at_level(logging.WARNING, logger="kmigrate.claims.log"):
        survived(kind, claims_go_on)
    warned = [r.getMessage() for r in caplog.records if f"offset {offsets[0]} of {CLAIMS_TOPIC}" in r.getMessage()]
    assert warned and all("is not a claim" in text and "skipped" in text for text in warned), caplog.text
    assert len(warned) == 2  # once by the fresh reader, once by this process's shared one


def test_the_default_state_location_is_the_airflow_users(tmp_path):
    """Not under /tmp, where any local user could create it first; KMIGRATE_STATE_LOCATION overrides it."""
    env = {k: v for k, v in os.environ.items() if k != "KMIGRATE_STATE_LOCATION"}
    path = os.pathsep.join([str(PROJECT_DIR / "plugins"), str(PROJECT_DIR / "include"), env.get("PYTHONPATH", "")])
    code = "from kmigrate_airflow import params; print(params.DEFAULT_STATE)"

    def default(**extra):
        return subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": path, **extra}, check=True,
                              capture_output=True, text=True, timeout=120).stdout.strip()

    assert default(AIRFLOW_HOME=str(tmp_path / "home")) == str(tmp_path / "home" / "kmigrate-state")
    assert default(AIRFLOW_HOME=str(tmp_path), KMIGRATE_STATE_LOCATION="s3://bucket/state") == "s3://bucket/state"


def test_the_forms_run_name_rule_is_the_manifests():
    from kmigrate import manifest
    from kmigrate_airflow.params import RUN_NAME

    assert RUN_NAME == manifest._RUN_ID.pattern
