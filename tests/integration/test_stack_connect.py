"""Kafka Connect on the pinned version: KIP-875 stop/offsets and KIP-980 STOPPED creation, through
the project's Connect client, against the real source and target workers."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConnectorNotFound, ConnectorStateError, ConnectUnreachable
from kmigrate.kafka.connect import ConnectClient

from tests.support.connect import file_source_config
from tests.support.kafka import create_topic, read_partition, watermarks
from tests.support.waiting import wait_until


def test_file_source_stop_get_and_patch_offsets(stack, unique_name, tmp_path, connectors):
    lines = [f"line {i:03d}" for i in range(20)]
    source_file = tmp_path / "input.txt"
    source_file.write_text("".join(line + "\n" for line in lines))
    file_size = source_file.stat().st_size
    client = stack.source_connect
    create_topic(stack.source, unique_name)

    client.create(unique_name, file_source_config(source_file, unique_name))
    connectors.append((client, unique_name))
    wait_until(lambda: watermarks(stack.source, unique_name)[1] == len(lines), "all lines in the topic")
    assert [v.decode() for _, _, v in read_partition(stack.source, unique_name)] == lines

    client.stop(unique_name)
    status = client.status(unique_name)
    assert status["connector"]["state"] == "STOPPED" and status["tasks"] == []

    offsets = wait_until(lambda: client.offsets(unique_name), "committed offsets")
    assert offsets == [{"partition": {"filename": str(source_file)}, "offset": {"position": file_size}}]

    # Move the position back to the start of line 15: resumed, the connector must re-read lines 15..19.
    rewind_to = sum(len(line) + 1 for line in lines[:15])
    message = client.alter_offsets(unique_name, [{"partition": {"filename": str(source_file)},
                                                  "offset": {"position": rewind_to}}])
    assert "success" in message.lower()
    assert client.offsets(unique_name) == [{"partition": {"filename": str(source_file)},
                                            "offset": {"position": rewind_to}}]

    client.resume(unique_name)
    wait_until(lambda: watermarks(stack.source, unique_name)[1] == len(lines) + 5, "re-read lines after rewind")
    assert [v.decode() for _, _, v in read_partition(stack.source, unique_name)] == lines + lines[15:]


def test_create_in_stopped_state_then_patch_then_resume(stack, unique_name, tmp_path, connectors):
    lines = [f"row {i}" for i in range(10)]
    source_file = tmp_path / "rows.txt"
    source_file.write_text("".join(line + "\n" for line in lines))
    client = stack.target_connect
    create_topic(stack.target, unique_name)

    client.create(unique_name, file_source_config(source_file, unique_name), initial_state="STOPPED")
    connectors.append((client, unique_name))
    status = client.status(unique_name)
    assert status["connector"]["state"] == "STOPPED" and status["tasks"] == []
    assert client.offsets(unique_name) == []
    assert watermarks(stack.target, unique_name) == (0, 0)

    # A connector created STOPPED takes offsets before its first run: start it after line 6.
    start_at = sum(len(line) + 1 for line in lines[:6])
    client.alter_offsets(unique_name, [{"partition": {"filename": str(source_file)}, "offset": {"position": start_at}}])
    client.resume(unique_name)
    wait_until(lambda: watermarks(stack.target, unique_name)[1] == 4, "the last four lines")
    assert [v.decode() for _, _, v in read_partition(stack.target, unique_name)] == lines[6:]


def test_connect_errors_are_clear(stack, unique_name, tmp_path, connectors):
    client = stack.source_connect
    with pytest.raises(ConnectorNotFound, match=unique_name):
        client.offsets(unique_name)

    (tmp_path / "f.txt").write_text("a\n")
    create_topic(stack.source, unique_name)
    client.create(unique_name, file_source_config(tmp_path / "f.txt", unique_name))
    connectors.append((client, unique_name))
    with pytest.raises(ConnectorStateError, match="already exists"):
        client.create(unique_name, file_source_config(tmp_path / "f.txt", unique_name))
    client.wait_for(unique_name, lambda st: st["connector"]["state"] == "RUNNING", "RUNNING", 30)
    with pytest.raises(ConnectorStateError, match="STOPPED"):
        client.alter_offsets(unique_name, [{"partition": {"filename": "x"}, "offset": {"position": 0}}])

    with pytest.raises(ConnectUnreachable, match="localhost:9"):
        ConnectClient("http://localhost:9", request_timeout_s=2).connectors()
