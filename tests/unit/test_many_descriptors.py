"""A process holding thousands of connections (a mirror task copying thousands of partitions) numbers
its sockets past 1024, where select() refuses them: the checks on a connection and on what listens
must work there too."""
from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import Iterator

import pytest

from kmigrate.client_settings import listening
from kmigrate.kafka.wire import BrokerConnection

from tests.support.waiting import wait_until

HIGH = 1500


@contextlib.contextmanager
def descriptors_past(number: int) -> Iterator[None]:
    """Descriptors held open up to `number`, so that the next ones the process opens are numbered above it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < number + 100:
        pytest.skip(f"the process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, number + 100), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(number)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_numbered_past_1024_says_whether_an_answer_waits() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    with descriptors_past(HIGH), server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        assert client.fileno() > 1024
        conn = BrokerConnection.__new__(BrokerConnection)
        conn._sock = client
        try:
            assert conn.quiet() and not conn.answer_waiting()
            accepted.sendall(b"\0\0\0\0")
            wait_until(conn.answer_waiting, "the answer seen on the connection", 5, poll_s=0.001)
            assert not conn.quiet()
        finally:
            client.close()
            accepted.close()


def test_what_listens_is_known_with_sockets_numbered_past_1024() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with descriptors_past(HIGH):
        assert listening("source", f"127.0.0.1:{port}", 2.0) is True
        server.close()
        assert listening("source", f"127.0.0.1:{port}", 2.0) is False
