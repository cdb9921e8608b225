"""How the Kafka Connect client names a worker that breaks off an answer (pure transport: a local
socket plays a worker killed in the middle of a chunked reply, as a `kill -9` of a live worker does)."""
from __future__ import annotations

import socket
import threading

import pytest
from kmigrate.errors import ConnectUnreachable
from kmigrate.kafka.connect import ConnectClient


def test_an_answer_broken_off_mid_chunk_is_a_worker_unreachable_not_a_crash():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_half() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"10\r\n{\"a\": [1, 2, 3]")  # a chunk of 16 bytes cut short, then the connection closed

    worker = threading.Thread(target=answer_half, daemon=True)
    worker.start()
    try:
        with pytest.raises(ConnectUnreachable, match=f"127.0.0.1:{port} broke off its answer to GET /connectors"):
            ConnectClient(f"http://127.0.0.1:{port}", request_timeout_s=5).connectors()
    finally:
        worker.join(5)
        server.close()
