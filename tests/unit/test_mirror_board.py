"""The board of a migration done one application at a time (kmigrate.run.mirror.board), from a run
manifest's mirror status and move records: each topic mirrored, promoting or promoted (with its
window and any split brain), each group synced, moved or moved back, each connector moved."""
from __future__ import annotations

import time

import pytest
from kmigrate.errors import MirrorStillRunning
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import completion, connector_moves
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.board import board, left, render, write_board
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import STOP
from kmigrate.run.records import moves, timeline


def _partition(topic, partition, behind):
    return {"topic": topic, "partition": partition, "source_end": 10 + behind, "dr_end": 10, "behind_records": behind,
            "behind_s": 0.3 if behind else 0.0, "error": None, "own_end": 10, "asked": None}


def _manifest(tmp_path):
    manifest = Manifest(str(tmp_path), "mirror")
    mirror_status.write(manifest, {
        "round": 7, "term": 2, "heartbeat": "2026-12-07T01:00:00.000+00:00", "behind_records": 3, "behind_s_max": 0.3,
        "partitions": [_partition("clicks", 0, 3), _partition("clicks", 1, 0), _partition("audit", 0, 0)],
        "groups": [{"group": "audit-readers", "partitions": 1, "written": 0, "capped": 0},
                   {"group": "busy", "skipped": "it has members on the DR cluster: m-1"},
                   {"group": "payments-readers", "moved": "moved", "at": "2026-12-07T00:58:00.000+00:00"}],
        "promoted": [{"topic": "payments", "partitions": 2, "at": None, "ended": "x", "from_term": 2,
                      "split_brain": [{"partition": 1, "records": 4, "first_offset": 50}]}]})
    manifest.replace(moves.part("payments-readers"), {"group": "payments-readers", "state": "moved",
                                                       "began": "b", "ended": "2026-12-07T00:58:00.000+00:00",
                                                       "window_s": 1.2, "offsets": []})
    manifest.replace(moves.part("old-app"), {"group": "old-app", "state": "back", "began": "b", "ended": "e",
                                              "back_at": "2026-12-07T00:59:00.000+00:00", "offsets": []})
    manifest.replace(moves.topic_part("payments"), {"topic": "payments", "state": "promoted", "began": "b",
                                                     "ends": {"0": 40, "1": 50}, "ended": "2026-12-07T00:59:30.000+00:00",
                                                     "window_s": 3.4})
    manifest.replace(moves.topic_part("orders"), {"topic": "orders", "state": "promoting", "began": "2026-12-07T01:00"})
    manifest.replace(connector_moves.part("sink"), {"connector": "sink", "type": "sink", "state": "moved",
                                                     "state_before": "RUNNING", "ended": "2026-12-07T00:57:00.000+00:00"})
    return manifest


def test_the_board_names_where_every_topic_group_and_connector_stands(tmp_path):
    b = board(_manifest(tmp_path))
    topics = {t["topic"]: t for t in b["topics"]}
    assert {t: r["state"] for t, r in topics.items()} == {"audit": "mirrored", "clicks": "mirrored",
                                                          "orders": "promoting", "payments": "promoted"}
    assert (topics["clicks"]["partitions"], topics["clicks"]["behind_records"]) == (2, 3)
    assert (topics["payments"]["window_s"], topics["payments"]["split_brain_records"]) == (3.4, 4)
    groups = {g["group"]: g for g in b["groups"]}
    assert {g: r["state"] for g, r in groups.items()} == {"audit-readers": "synced", "busy": "skipped",
                                                          "old-app": "back", "payments-readers": "moved"}
    assert groups["payments-readers"]["window_s"] == 1.2 and "m-1" in groups["busy"]["note"]
    assert b["connectors"] == [{"connector": "sink", "type": "sink", "state": "moved", "state_before": "RUNNING",
                                "at": "2026-12-07T00:57:00.000+00:00"}]


def test_the_board_renders_counts_and_a_row_each_and_is_written_next_to_the_parts(tmp_path):
    manifest = _manifest(tmp_path)
    text = render(board(manifest))
    assert "Topics promoted on the DR cluster: **1 of 4**" in text
    assert "Consumer groups moved: **1 of 4**" in text
    assert "| payments | 2 | promoted | 0 | 3.4 | 2026-12-07T00:59:30.000+00:00 | **4 records written on the source since** |" in text
    assert "| old-app | back |" in text and "| sink | sink | moved | RUNNING |" in text
    path = write_board(manifest)
    assert path.endswith("/board.md") and (tmp_path / "mirror" / "board.md").read_text() == text


def test_what_is_left_on_the_source_is_named_and_a_moved_sinks_group_counts_as_moved():
    b = {"topics": [{"topic": "a", "state": "promoted"}, {"topic": "b", "state": "mirrored"}],
         "groups": [{"group": "g", "state": "moved"}, {"group": "h", "state": "back"},
                    {"group": "connect-sink", "state": "synced"}, {"group": "connect-other", "state": "synced"}],
         "connectors": [{"connector": "sink", "type": "sink", "state": "moved"},
                        {"connector": "src", "type": "source", "state": "moving"}]}
    assert left(b) == ["topic b (mirrored)", "group h (back)", "group connect-other (synced)", "connector src (moving)"]
    done = {"topics": [{"topic": "a", "state": "promoted", "partitions": 1, "behind_records": 0}],
            "groups": [{"group": "g", "state": "moved"}], "connectors": []}
    assert left(done) == [] and "Nothing left on the source" in render({**done, "run": "r", "round": 1,
                                                                         "heartbeat": "h", "stopped": True,
                                                                         "behind_records": 0, "behind_s_max": 0})


def test_the_last_move_asks_the_mirror_to_stop_waits_for_it_and_releases_the_claims(tmp_path, monkeypatch):
    manifest = Manifest(str(tmp_path), "mirror")
    write_spec(manifest, MirrorSpec("clicks|payments", interval_s=0.5))
    status = {"round": 3, "heartbeat": timeline.iso(time.time()), "pid": 42, "host": "h", "partitions": [],
              "groups": [], "promoted": [{"topic": "payments", "split_brain": []}]}
    mirror_status.write(manifest, {**status, "partitions": [_partition("clicks", 0, 0)]})
    manifest.replace(moves.topic_part("payments"), {"topic": "payments", "state": "promoted", "ends": {}, "ended": "e"})
    released = []
    monkeypatch.setattr(completion, "release_topics", lambda target, run, deployment: released.append((run, deployment))
                        or True)
    said = []
    assert completion.end_if_complete(manifest, None, say=said.append) == {"complete": False,
                                                                            "left": ["topic clicks (mirrored)"]}
    assert not manifest.exists(STOP) and not released and "the mirror goes on" in said[-1]

    mirror_status.write(manifest, status)  # clicks promoted meanwhile, say: nothing left; the mirror still beats
    manifest.replace(moves.topic_part("clicks"), {"topic": "clicks", "state": "promoted", "ends": {}, "ended": "e"})
    with pytest.raises(MirrorStillRunning, match="process 42 on h.*move again: the moves are done"):
        completion.end_if_complete(manifest, None, wait_s=0.3, say=said.append)
    assert manifest.read(STOP)["why"] == completion.WHY and not released  # asked; the claims kept until it stopped
    mirror_status.write(manifest, status, stopped=True)  # the driver saw the request
    assert completion.end_if_complete(manifest, None, wait_s=1, say=said.append) == {
        "complete": True, "left": [], "claims_released": True}
    assert released == [("mirror", str(tmp_path))]
