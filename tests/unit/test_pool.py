"""The per-process client pool: one user at a time, reuse after a normal end, closed after an error,
when idle too long, or past the per-key cap."""
from __future__ import annotations

import socket

import pytest
from kmigrate.kafka.pool import Pool
from kmigrate.kafka.wire import BrokerConnection

from tests.support.waiting import wait_until


class Client:
    made = 0

    def __init__(self) -> None:
        Client.made += 1
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_client_is_reused_by_key_and_closed_after_an_error():
    pool: Pool[Client] = Pool(Client.close)
    with pool.use("a", Client) as first:
        pass
    with pool.use("a", Client) as again, pool.use("a", Client) as other, pool.use("b", Client) as b:
        assert again is first and other is not first and b is not first  # one user at a time
    with pytest.raises(RuntimeError), pool.use("a", Client) as failing:
        raise RuntimeError("copy failed")
    assert failing.closed and pool.idle() == 2
    pool.close_all()
    assert pool.idle() == 0 and first.closed and b.closed


def test_idle_clients_are_closed_and_the_cap_holds(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("kmigrate.kafka.pool.time.monotonic", lambda: now[0])
    pool: Pool[Client] = Pool(Client.close, idle_s=30, per_key=1)
    with pool.use("a", Client) as one, pool.use("a", Client) as two:
        pass
    assert two.closed != one.closed and pool.idle() == 1  # the second over the cap of 1
    kept = one if not one.closed else two
    with pool.use("b", Client) as b:
        pass
    now[0] += 31
    with pool.use("c", Client) as c:  # any use sweeps what has been idle too long, whatever its key
        assert kept.closed and b.closed and not c.closed


def test_what_stays_idle_is_closed_though_no_one_uses_the_pool_again():
    """A Spark worker between jobs uses its pool no more: its idle clients are closed all the same."""
    pool: Pool[Client] = Pool(Client.close, idle_s=0.2)
    with pool.use("a", Client) as a, pool.use("b", Client) as b:
        pass
    assert not a.closed and pool.idle() == 2
    wait_until(lambda: a.closed and b.closed and pool.idle() == 0, "the idle clients closed", 5, poll_s=0.02)
    with pool.use("a", Client) as again:  # a new client, and a new reaper for it
        pass
    assert again is not a
    wait_until(lambda: again.closed, "the next idle client closed", 5, poll_s=0.02)


def test_an_idle_connection_its_broker_closed_is_not_handed_out_again():
    """A broker restarted while its connection sat idle in the pool: the next user gets a new one, not
    one whose first request fails with the broker having closed it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        made: list[BrokerConnection] = []

        def make() -> BrokerConnection:
            made.append(BrokerConnection("127.0.0.1", port, timeout_s=5))
            return made[-1]

        pool: Pool[BrokerConnection] = Pool(BrokerConnection.close, usable=BrokerConnection.quiet)
        with pool.use("broker", make) as first:
            accepted, _ = server.accept()
        with pool.use("broker", make) as again:
            assert again is first and first.quiet()  # open and quiet: reused
        accepted.close()  # the broker goes away
        wait_until(lambda: not first.quiet(), "the close seen on the idle connection", 5, poll_s=0.01)
        with pool.use("broker", make) as after:
            assert after is not first and len(made) == 2
        accepted, _ = server.accept()
        accepted.close()


def test_a_broker_connection_serves_every_timeout_it_is_asked_with(monkeypatch):
    """A reading's retries ask with what is left of its deadline, a new number each time: they share one
    pooled connection (each timeout set at its use), not a connection a number; and an admin likewise."""
    from kmigrate.config import ClusterConfig
    from kmigrate.kafka import leaders, pool as pool_module

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        cluster = ClusterConfig("source", {"bootstrap.servers": f"127.0.0.1:{port}"})
        monkeypatch.setattr(leaders, "connections", Pool(BrokerConnection.close, usable=BrokerConnection.quiet))
        seen = []
        for timeout_s in (2.9871, 2.4, 60.0):
            with leaders.connection(cluster, ("127.0.0.1", port), "kmigrate-ends", timeout_s) as conn:
                seen.append(conn)
                assert conn._sock.gettimeout() == timeout_s
        assert seen[0] is seen[1] is seen[2] and leaders.connections.idle() == 1
        leaders.connections.close_all()

    class Admin:
        def __init__(self, cluster, timeout_s):
            self.timeout_s = timeout_s

        def close(self):
            pass

    monkeypatch.setattr(pool_module, "ClusterAdmin", Admin)
    monkeypatch.setattr(pool_module, "admins", Pool(Admin.close))
    admins = []
    for timeout_s in (3.0, 10.0):
        with pool_module.shared_admin(cluster, timeout_s) as admin:
            admins.append(admin)
            assert admin.timeout_s == timeout_s
    assert admins[0] is admins[1]
