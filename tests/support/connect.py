"""Kafka Connect in the tests: Apache Kafka's FileStream connectors (a source reading a file's lines,
a sink writing a topic's values to a file), deleting connectors, and the run's copy step in this
process (the Spark job does the same per task; tested on its own) for the connector and group tests."""
from __future__ import annotations

from pathlib import Path

from kmigrate.manifest import Manifest, Part
from kmigrate.run.copying.plan import read_plan, translate_maps, work_units
from kmigrate.run.copying.tasks import copy_task
from kmigrate.run.targets.prepare import prepare_targets

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def file_source_config(path: Path, topic: str) -> dict[str, str]:
    return {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(path), "topic": topic}


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def delete_connectors(clients, names) -> None:
    """Delete each of `names` wherever it exists among the Connect `clients`."""
    for client in clients:
        for name in names:
            if name in client.connectors():
                client.delete(name)


def copy_run(stack, manifest: Manifest) -> list[dict]:
    """The copy step in this process (the Spark job does the same per task; tested on its own)."""
    resume = translate_maps(manifest)
    units = work_units(read_plan(manifest))
    prepare_targets(stack.source, stack.target, units)
    rows = [copy_task(unit, (stack.source, stack.target), manifest.run_id, resume.get((unit.topic, unit.partition), ()))
            for unit in units]
    assert all(r["ok"] for r in rows), rows
    manifest.write_once(Part.attempt(Part.COPY_RESULTS), {"rows": rows})
    return rows
