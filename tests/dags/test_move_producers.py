"""The kafka_move_producers DAG (`dag.test()`, real stack; the mirror's driver in this process, its
terms copied here): a topic whose producer stopped on the source is promoted on the mirror's DR
cluster, every record equal, and the mirror copies it no more; the mirror's only topic, its promotion
leaves nothing on the source: the mirror ends and its claims are released; a topic the mirror does
not hold is refused by name, without retry, and nothing is recorded for it."""
from __future__ import annotations

import re
import uuid

from kmigrate.claims.log import claim_log
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.completion import WHY
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import STOP
from kmigrate.run.records.moves import promotions

from tests.support.airflow import returned, run_dag, task_states
from tests.support.kafka import create_topic, produce, records_of
from tests.support.mirror import mirrored, wait_caught_up


def test_the_producers_move_dag_promotes_a_stopped_topic_and_refuses_one_outside_the_mirror(stack, dagbag, tmp_path):
    prefix = f"dagpromote{uuid.uuid4().hex[:6]}"
    topic, outside = f"{prefix}.orders", f"{prefix}x.audit"
    create_topic(stack.source, topic, 2)
    create_topic(stack.source, outside, 1)
    for partition in (0, 1):
        produce(stack.source, topic, [(None, b"%d" % i) for i in range(50)], partition=partition)
    state, run_name = tmp_path / "state", f"promote-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    # written as kafka_dr_mirror's start task writes it
    spec = write_spec(manifest, MirrorSpec(re.escape(prefix) + r"\.orders", interval_s=0.5, term_s=60.0))
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
        run = run_dag(dagbag, "kafka_move_producers", run_name=run_name, state_location=str(state),
                      move_topics=[topic], move_quiet_s=0.5, move_wait_s=60)
        assert task_states(run) == {"move_producers": "success"}, task_states(run)
        shown = returned(run, "move_producers")  # the task's XCom in the Airflow UI: where the run stands
        assert shown["complete"] and shown["left"] == [] and shown["board"].endswith("board.md"), shown
        # the mirror's one topic promoted, and it syncs no group: the move ended the mirror, released its claims
        status = mirror_status.read(manifest)
        assert status["stopped"] and manifest.read(STOP)["why"] == WHY
        assert not [r for r in claim_log(stack.target).current().runs.values() if r["run"] == run_name]
        refused = run_dag(dagbag, "kafka_move_producers", run_name=run_name, state_location=str(state),
                          move_topics=[outside], move_wait_s=60)
        assert task_states(refused) == {"move_producers": "failed"}, task_states(refused)
    assert [r["topic"] for r in status["promoted"]] == [topic] and not status["partitions"]
    assert promotions(manifest)[topic]["ends"] == {"0": 50, "1": 50} and outside not in promotions(manifest)
    for partition in (0, 1):
        assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)
    # the move's task left the board of the run's moves next to its parts
    board = (state / run_name / "board.md").read_text()
    assert f"| {topic} | 2 | promoted |" in board and "Nothing left on the source" in board and "(stopped)" in board
