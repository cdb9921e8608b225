"""The few Kafka wire-protocol requests the copier sends itself: Produce (v7) and Fetch (v11).

Both versions are non-flexible and served by Kafka 2.1 through 4.x. The connection speaks the
cluster's security protocol from its librdkafka settings (`Transport`): TLS with Python's ssl
module (server verification, client certificates for mutual TLS), then SASL PLAIN or
SCRAM-SHA-256/512 through kafka-python's SASL mechanisms, framed in SaslHandshake v1 and
SaslAuthenticate v1. What it cannot speak (GSSAPI, OAUTHBEARER, keystores or PEM strings in the
config) is named by `Transport.of`, and the callers take librdkafka's record path instead."""
from __future__ import annotations

import dataclasses
import logging
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterable

from kmigrate.errors import CopyError, CopyInterrupted, OffsetMismatch
from kmigrate.kafka import throttle
from kmigrate.kafka.transport import AuthenticationFailed, Transport

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, SASL_HANDSHAKE, INIT_PRODUCER_ID, SASL_AUTHENTICATE = 0, 1, 2, 17, 22, 36
FIND_COORDINATOR = 10
GROUP_COORDINATOR, TRANSACTION_COORDINATOR = 0, 1
PRODUCE_VERSION, FETCH_VERSION = 7, 11
ERRORS = {
    1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE", 13: "NETWORK_EXCEPTION",
    14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 22: "ILLEGAL_GENERATION", 25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS", 29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH", 56: "KAFKA_STORAGE_ERROR",
    58: "SASL_AUTHENTICATION_FAILED", 59: "UNKNOWN_PRODUCER_ID", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
    76: "UNSUPPORTED_COMPRESSION_TYPE", 78: "OFFSET_NOT_AVAILABLE", 87: "INVALID_RECORD",
}
# Errors that pass (a leader moving, a broker restarting, the ISR shrinking for a while, a write refused
# because the one before it was): the copy resumes from the target's end (`CopyInterrupted`).
TRANSIENT = frozenset({3, 5, 6, 7, 13, 14, 15, 19, 20, 45, 56, 59, 74, 75, 78})
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # RecordBatch v2 header, 61 bytes


def time_left(deadline: float) -> float:
    """A retried request's timeout: what is left of its reading's (`deadline`, time.monotonic()). A
    broker gone fails the first tries at once; with the whole timeout each, the last one doubled it."""
    return max(0.1, deadline - time.monotonic())


def error_name(code: int) -> str:
    return ERRORS.get(code, f"error {code}")


def _string(text: str) -> bytes:
    data = text.encode(errors="surrogateescape")  # as read_string decodes: a metadata round-trips byte for byte
    return struct.pack(">h", len(data)) + data


def read_string(data: memoryview, pos: int) -> tuple[str | None, int]:
    """A nullable string of the protocol at `pos`, and the position after it."""
    (size,) = struct.unpack_from(">h", data, pos)
    if size < 0:
        return None, pos + 2
    return bytes(data[pos + 2: pos + 2 + size]).decode(errors="surrogateescape"), pos + 2 + size


def find_coordinator(conn: BrokerConnection, key: str, key_type: int) -> tuple[int, tuple[str, int]]:
    """(error code, coordinator address) of a group (GROUP_COORDINATOR) or transactional id
    (TRANSACTION_COORDINATOR), asked of the broker behind `conn` (FindCoordinator v1)."""
    conn.send(FIND_COORDINATOR, 1, _string(key) + struct.pack(">b", key_type))
    _, data = conn.receive()
    _throttle, code = struct.unpack_from(">ih", data, 0)
    _, pos = read_string(data, 6)
    host, pos = read_string(data, pos + 4)
    (port,) = struct.unpack_from(">i", data, pos)
    return code, (host or "", port)


@dataclasses.dataclass(frozen=True)
class Batch:
    """One RecordBatch (v2) as fetched, or one message of an older format (`legacy`): its bytes and the
    header fields the copier decides on."""

    data: bytes | memoryview  # a view into the fetched response (no copy)
    base_offset: int
    last_offset: int
    attributes: int
    records: int
    magic: int = 2

    @property
    def legacy(self) -> bool:
        """A message of format v0 or v1: copied record by record, into v2 batches on the target."""
        return self.magic < 2

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & 0x08)

    @property
    def delete_horizon(self) -> bool:
        """Set by the log cleaner on batches with tombstones: the base timestamp holds the delete horizon."""
        return bool(self.attributes & 0x40)

    @property
    def dense(self) -> bool:
        """Every offset of the batch holds a record (compaction removed none)."""
        return self.records == self.last_offset - self.base_offset + 1

    def for_produce(self) -> memoryview:
        """The batch as a client may produce it: base offset 0, no partition leader epoch, not
        transactional, no producer id (`Idempotence.stamp` gives it one). Rewritten in place when
        the batch's buffer is writable (as fetched, so that its bytes are not copied again), else
        in a copy."""
        data = self.data
        if not isinstance(data, memoryview) or data.readonly:
            data = memoryview(bytearray(data))
        struct.pack_into(">q", data, 0, 0)
        struct.pack_into(">i", data, 12, -1)
        struct.pack_into(">h", data, 21, self.attributes & ~0x10)
        return data


@dataclasses.dataclass
class Idempotence:
    """An idempotent producer's id, epoch and next sequence number for one partition, given to the
    raw Produce requests: the broker appends a batch only if it is the next in sequence, so when
    one batch of a pipeline is refused, none after it can be appended at an offset that was
    meant for another (they fail with OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    producer_id: int
    epoch: int
    sequence: int = 0

    def stamp(self, batch: bytes | memoryview) -> memoryview:
        """`batch` with this producer's id, epoch and next sequence, CRC recomputed (it covers the
        attributes onwards); rewritten in place when writable, else in a copy."""
        import crc32c

        data = batch if isinstance(batch, memoryview) and not batch.readonly else memoryview(bytearray(batch))
        (records,) = struct.unpack_from(">i", data, 57)
        struct.pack_into(">qhi", data, 43, self.producer_id, self.epoch, self.sequence)
        struct.pack_into(">I", data, 17, crc32c.crc32c(data[21:]))
        self.sequence = (self.sequence + records) % (1 << 31)
        return data


def parse_batches(records: bytes | memoryview) -> list[Batch]:
    """The whole batches in a fetched records blob (a trailing partial batch is dropped), each a
    view into it. A message of format v0 or v1 (a log written before Kafka 0.11, or under an older
    message.format.version) comes as a `legacy` Batch covering just its own offset (a compressed
    wrapper's is its last inner record's): the copier reads those through the record path."""
    records = memoryview(records)
    out, pos, size = [], 0, len(records)
    while pos + 17 <= size:
        base, length, _epoch, magic = struct.unpack_from(">qiib", records, pos)
        end = pos + 12 + length
        if end > size:
            break
        if magic < 2:
            out.append(Batch(records[pos:end], base, base, 0, 1, magic))
        else:
            if pos + BATCH_HEADER.size > size:
                break
            (base, length, _epoch, magic, _crc, attributes, last_delta, _t0, _t1, _pid, _pe, _seq,
             count) = BATCH_HEADER.unpack_from(records, pos)
            out.append(Batch(records[pos:end], base, base + last_delta, attributes, count))
        pos = end
    return out


def _readable(sock: socket.socket) -> bool:
    """Whether `sock` has something to read, or was closed (asked without waiting). poll, not select:
    select refuses a descriptor numbered 1024 or more, which a worker holding thousands of
    connections (a mirror task's partitions) reaches."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class BrokerConnection:
    """One connection to a broker (TCP, TLS when the transport has it, authenticated with SASL when
    it asks for it), requests pipelined, responses read in order."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0, client_id: str = "kmigrate",
                 transport: Transport | None = None) -> None:
        transport = transport or Transport()
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client_id = _string(client_id)
        self._correlation = 0
        try:
            if transport.tls is not None:
                try:
                    sock = transport.tls.wrap_socket(sock, server_hostname=host)
                except ssl.SSLError as exc:
                    raise AuthenticationFailed(f"TLS handshake with the broker {host}:{port} failed: {exc}; check the "
                                               "connection's ssl.* settings (CA, client certificate)") from exc
            self._sock = sock
            if transport.mechanism:
                self._authenticate(host, port, transport)
        except BaseException:
            sock.close()
            raise

    def _authenticate(self, host: str, port: int, transport: Transport) -> None:
        """SaslHandshake v1, then SaslAuthenticate v1 rounds driven by kafka-python's mechanism."""
        from kafka.net.sasl import get_sasl_mechanism

        self.send(SASL_HANDSHAKE, 1, _string(transport.mechanism))
        _, data = self.receive()
        (error_code,) = struct.unpack_from(">h", data, 0)
        if error_code:
            raise AuthenticationFailed(f"the broker {host}:{port} does not take SASL mechanism {transport.mechanism} "
                                       f"({error_name(error_code)}); check the connection's sasl.mechanism")
        mechanism = get_sasl_mechanism(transport.mechanism)(
            sasl_mechanism=transport.mechanism, sasl_plain_username=transport.username,
            sasl_plain_password=transport.password, security_protocol="SASL_SSL" if transport.tls else "SASL_PLAINTEXT",
            host=host)
        while not mechanism.is_done():
            token = mechanism.auth_bytes()
            self.send(SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token)
            _, data = self.receive()
            error_code, message_len = struct.unpack_from(">hh", data, 0)
            pos = 4 + max(message_len, 0)
            if error_code:
                message = bytes(data[4:pos]).decode(errors="replace") if message_len > 0 else error_name(error_code)
                raise AuthenticationFailed(f"SASL {transport.mechanism} authentication of {transport.username!r} at the "
                                           f"broker {host}:{port} failed: {message}")
            (size,) = struct.unpack_from(">i", data, pos)
            mechanism.receive(bytes(data[pos + 4: pos + 4 + max(size, 0)]))
        if not mechanism.is_authenticated():
            raise AuthenticationFailed(f"SASL {transport.mechanism} authentication of {transport.username!r} at the "
                                       f"broker {host}:{port} did not complete")

    def close(self) -> None:
        self._sock.close()

    def set_timeout(self, timeout_s: float) -> None:
        """Requests from now on fail once an answer is `timeout_s` late."""
        self._sock.settimeout(timeout_s)

    def quiet(self) -> bool:
        """Whether this idle connection has nothing to read, as it must (a broker sends nothing
        unasked): one readable was closed by its broker (restarted since it was last used)."""
        return not _readable(self._sock)

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: bytes, tail: bytes | memoryview = b"") -> int:
        """Send one request: its header, `body`, then `tail` (a record batch, sent from its own
        buffer without a copy)."""
        throttle.wait(self)  # a quota's throttle time asked for by the broker (KIP-219)
        self._correlation += 1
        header = struct.pack(">hhi", api_key, version, self._correlation) + self._client_id
        self._sock.sendall(struct.pack(">i", len(header) + len(body) + len(tail)) + header + body)
        if tail:
            self._sock.sendall(tail)
        return self._correlation

    def receive(self) -> tuple[int, memoryview]:
        """(correlation id, body) of the next response; the body is a view into one buffer that
        the socket filled directly."""
        (size,) = struct.unpack(">i", self._recv(4))
        data = self._recv(size)
        return struct.unpack_from(">i", data, 0)[0], data[4:]

    def answer_waiting(self) -> bool:
        """Whether a response has begun to arrive (asked without waiting)."""
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return True
        return _readable(self._sock)

    def _recv(self, size: int) -> memoryview:
        view, got = memoryview(bytearray(size)), 0
        while got < size:
            count = self._sock.recv_into(view[got:], min(size - got, 4 << 20))
            if not count:
                raise ConnectionError("the broker closed the connection")
            got += count
        return view

    # ---------------------------------------------------------------- InitProducerId v1, ListOffsets v2

    def idempotence(self) -> Idempotence:
        """A new idempotent producer id (no transactional id) from this broker."""
        self.send(INIT_PRODUCER_ID, 1, struct.pack(">hi", -1, 60_000))
        _, data = self.receive()
        _throttle, error_code, producer_id, epoch = struct.unpack_from(">ihqh", data, 0)
        if error_code:
            raise (CopyInterrupted if error_code in TRANSIENT else CopyError)(
                f"the target broker gave no producer id: {error_name(error_code)}", topic="", partition=-1)
        return Idempotence(producer_id, epoch)

    def end_offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(error code, log end offset) and (error code, high watermark) of the partition on this
        broker, as one number pair: the log end offset is what the replica holds, committed or not
        (ListOffsets as the debugging replica id -2), the high watermark what a consumer sees."""
        ends = []
        for replica_id in (-2, -1):
            self.send(LIST_OFFSETS, 2, struct.pack(">ibi", replica_id, 0, 1) + _string(topic)
                      + struct.pack(">iiq", 1, partition, -1))
        for _ in range(2):
            _, data = self.receive()
            (name_len,) = struct.unpack_from(">h", data, 8)
            _index, error_code, _ts, offset = struct.unpack_from(">ihqq", data, 10 + name_len + 4)
            if error_code:
                raise CopyInterrupted(f"{topic}[{partition}]: listing the target's end offsets failed: "
                                      f"{error_name(error_code)}", topic=topic, partition=partition)
            ends.append(offset)
        return ends[0], ends[1]

    # ---------------------------------------------------------------- Produce v7

    def send_produce(self, topic: str, partition: int, batch: bytes | memoryview, timeout_ms: int = 30_000) -> int:
        body = b"".join((
            struct.pack(">h", -1),                  # transactional id: null
            struct.pack(">hi", -1, timeout_ms),     # acks=all
            struct.pack(">i", 1), _string(topic),
            struct.pack(">iii", 1, partition, len(batch)),
        ))
        return self.send(PRODUCE, PRODUCE_VERSION, body, batch)

    def receive_produce(self) -> tuple[int, int, int]:
        """(correlation id, error code, base offset) of a one-partition Produce response."""
        correlation_id, data = self.receive()
        throttle.note(self, data)
        (name_len,) = struct.unpack_from(">h", data, 4)
        _index, error_code, base_offset = struct.unpack_from(">ihq", data, 6 + name_len + 4)
        return correlation_id, error_code, base_offset

    # ---------------------------------------------------------------- Fetch v11

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 16 << 20,
              max_wait_ms: int = 100) -> tuple[int, int, memoryview]:
        """(error code, high watermark, records) of one partition, read_committed; the records are
        a view into the response."""
        self.send_fetch(topic, partition, offset, max_bytes, max_wait_ms)
        return self.receive_fetch()

    def send_fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 16 << 20,
                   max_wait_ms: int = 100) -> int:
        """Send a Fetch without waiting for it: the caller does other work, then `receive_fetch`."""
        body = b"".join((
            struct.pack(">iiiibii", -1, max_wait_ms, 1, max_bytes, 1, 0, -1),
            struct.pack(">i", 1), _string(topic),
            struct.pack(">iiiqqi", 1, partition, -1, offset, -1, max_bytes),
            struct.pack(">i", 0), _string(""),
        ))
        return self.send(FETCH, FETCH_VERSION, body)

    def receive_fetch(self) -> tuple[int, int, memoryview]:
        _, data = self.receive()
        throttle.note(self, data, 0)
        _throttle, error_code, _session, _topics = struct.unpack_from(">ihii", data, 0)
        if error_code:
            return error_code, -1, memoryview(b"")
        (name_len,) = struct.unpack_from(">h", data, 14)
        pos = 16 + name_len + 4
        _index, error_code, high, _lso, _log_start, aborted = struct.unpack_from(">ihqqqi", data, pos)
        pos += 34 + max(aborted, 0) * 16 + 4      # skip aborted transactions and preferred replica
        (length,) = struct.unpack_from(">i", data, pos)
        return error_code, high, data[pos + 4: pos + 4 + max(length, 0)]


def produce_at(conn: BrokerConnection, topic: str, partition: int, batches: Iterable[tuple[bytes | memoryview, int]],
               what: str, in_flight: int = 5, timeout_ms: int = 30_000, producer: Idempotence | None = None) -> None:
    """Produce each (batch, expected base offset) in order as one idempotent producer (`producer`,
    or a producer id of this call), up to `in_flight` requests pipelined (the broker checks sequences
    over its last 5), and check every response: a transient error (a leader moved, too few in-sync
    replicas) is CopyInterrupted, any other fails with its name, and a base offset other than the
    expected one is an OffsetMismatch (the expected-offset check of docs/DESIGN.md §4.1, per batch).
    A connection that breaks is CopyInterrupted too."""
    pending: dict[int, int] = {}
    batches = iter(batches)
    try:
        producer = producer or conn.idempotence()
        item = next(batches, None)
        while item is not None or pending:
            while item is not None and len(pending) < in_flight:
                pending[conn.send_produce(topic, partition, producer.stamp(item[0]), timeout_ms)] = item[1]
                item = next(batches, None)
            correlation_id, error_code, base_offset = conn.receive_produce()
            want = pending.pop(correlation_id)
            if error_code:
                raise (CopyInterrupted if error_code in TRANSIENT else CopyError)(
                    f"{topic}[{partition}]: writing {what} at offset {want} to the target failed: "
                    f"{error_name(error_code)}; check the target broker log", topic=topic, partition=partition)
            if base_offset != want:
                raise OffsetMismatch(topic, partition, want, base_offset)
    except OSError as exc:
        raise CopyInterrupted(f"{topic}[{partition}]: the connection to the target broker broke while writing {what}: "
                              f"{exc}", topic=topic, partition=partition) from exc
