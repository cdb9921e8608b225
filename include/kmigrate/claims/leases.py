"""Leases on target partitions (docs/DESIGN.md §4.7): one copier writes a partition at a time.

A lease is a record in the claims log (`kmigrate.claims.log`). It takes effect when the partition is
free, its lease ran out (no renewal for `lease_s` by the broker's clock), or its holder's process
is gone (seen by a claimant on the same host). The holder renews it every `lease_s / 5` and stops
writing when no renewal has been confirmed for `lease_s / 2`, well before anyone may take it over.
A Spark task of many partitions takes the leases of all of them in one append and one read of the
log (`acquire_all`), renews them in a record for thousands (`renewals`), and gives them back in one
append (`release_all`)."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from kmigrate.claims.log import claim_log
from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyInterrupted, PartitionHeld
from kmigrate.kafka.pool import shared_admin

log = logging.getLogger(__name__)

LEASE_S = 30.0
# leases renewed by one record: a scope and its holder take about 100 bytes of JSON, so a record stays
# far below the claims topic's 1 MB
RENEWAL_LEASES = 2_000


class PartitionLease:
    """One copier's lease on one target partition. `acquire` before writing, `check` before each
    write (raises CopyInterrupted when the lease is not known to be held), `release` at the end."""

    def __init__(self, target: ClusterConfig, run: str, topic: str, partition: int, lease_s: float = LEASE_S) -> None:
        self.log = claim_log(target)
        self.run, self.topic, self.partition, self.lease_s = run, topic, partition, lease_s
        self.scope = f"{topic}:{partition}"
        pid = os.getpid()
        self.holder = f"{run}/{socket.gethostname()}/{pid}/{uuid.uuid4().hex[:8]}"
        self._base = {"scope": self.scope, "holder": self.holder, "run": run, "host": socket.gethostname(),
                      "pid": pid, "started": _started(pid), "lease_ms": int(lease_s * 1000)}
        self._confirmed = -float("inf")  # monotonic time a confirmed claim or renewal was sent
        self._lost = False
        self._renewer: _Renewer | None = None

    def held(self) -> bool:
        return not self._lost and time.monotonic() - self._confirmed < self.lease_s / 2

    def check(self) -> None:
        if not self.held():
            raise CopyInterrupted(f"{self.topic}[{self.partition}]: this copier's lease on the partition is not "
                                  "confirmed (the claims topic did not answer, or the lease was taken over); it stops "
                                  "writing until it holds the lease again", topic=self.topic, partition=self.partition)

    def acquire(self, wait_s: float | None = None) -> None:
        """Hold the lease, waiting up to `wait_s` (default: twice the lease) for another holder to end;
        PartitionHeld naming the holder after that."""
        if self.held():
            return
        self._stop_renewer()
        began = time.monotonic()
        deadline = began + (2 * self.lease_s if wait_s is None else wait_s)
        while True:
            sent = time.monotonic()
            other = self.log.state.parts.get(self.scope)
            breaks = other["holder"] if other and other["holder"] != self.holder and _gone(other) else None
            if self.log.submit(self._claim(breaks, self._young_log() and _target_ends([self])[self.scope] == 0)):
                if breaks:
                    log.info("%s: lease of %s taken over: its holder %s has ended", self.scope, self.holder, breaks)
                self._took(sent)
                return
            other = self.log.state.parts.get(self.scope, {})
            if time.monotonic() > deadline:
                if other.get("holder"):
                    holder = (f"another copier holds the target partition: {other['holder']} (run "
                              f"{other.get('run')!r}, host {other.get('host')}, pid {other.get('pid')})")
                elif self._young_log():  # `Claims.born`: a copier leased in a claims topic deleted since may write
                    holder = (f"the claims topic is younger than a lease ({self.lease_s:.0f} s) and the target "
                              "partition is not empty: a copier of a claims topic deleted since may still write")
                else:
                    holder = "another copier held the target partition when this one claimed it (released since)"
                raise PartitionHeld(
                    f"{self.topic}[{self.partition}]: {holder}"
                    + (f"; it was not released in {time.monotonic() - began:.0f} s" if wait_s != 0 else "") +
                    f". Two copies of one partition never write at once: let that one end (a dead holder's lease "
                    f"runs out {self.lease_s:.0f} s after its last renewal), then retry; the copy resumes from the "
                    "target's end", topic=self.topic, partition=self.partition)
            time.sleep(min(1.0, self.lease_s / 10))

    def _claim(self, breaks: str | None = None, empty: bool = False) -> dict:
        return {**self._base, "kind": "lease", **({"breaks": breaks} if breaks else {}),
                **({"target_empty": True} if empty else {})}

    def _young_log(self) -> bool:
        """Whether the claims log may be younger than a lease (or has not been read yet): its claims then
        say whether the target partition is empty, the one case a young log grants (`Claims.born`)."""
        born = self.log.state.born
        return born is None or time.time() * 1000 - born < 2 * self.lease_s * 1000

    def _took(self, sent: float, renewer: _Renewer | None = None) -> None:
        """The lease took effect with the claim sent at `sent`: hold it, and renew it from now on
        (with `renewer`, together with the other leases it renews)."""
        self._confirmed, self._lost = sent, False
        self._renewer = renewer or _Renewer([self])
        self._renewer.start()

    def _stop_renewer(self) -> None:
        """No more renewals of this lease; a renewer shared with other leases goes on for them."""
        if self._renewer is not None:
            self._renewer.drop(self)
            self._renewer = None

    def release(self) -> None:
        release_all([self])


class _Renewer:
    """Renews its leases together every lease_s / 5, in one append to the claims log; a lease it
    cannot renew because another holder took it over is lost (its check() then fails)."""

    def __init__(self, leases: Sequence[PartitionLease]) -> None:
        self.leases = list(leases)
        self.stop = threading.Event()
        self._lock = threading.Lock()
        name = f"lease {self.leases[0].scope}" + (f" and {len(self.leases) - 1} more" if len(self.leases) > 1 else "")
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        if not self.thread.is_alive() and not self.stop.is_set():
            self.thread.start()

    def drop(self, lease: PartitionLease) -> None:
        with self._lock:
            self.leases = [held for held in self.leases if held is not lease]
            last = not self.leases
        if last:
            self.stop.set()
            if self.thread.is_alive() and threading.current_thread() is not self.thread:
                self.thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                lease_s = self.leases[0].lease_s if self.leases else 0.0
            if not lease_s or self.stop.wait(lease_s / 5):
                return
            with self._lock:
                renewing = [lease for lease in self.leases if not lease._lost]
            if not renewing:
                continue
            sent = time.monotonic()
            records = renewals(renewing)
            try:
                effective = renewing[0].log.submit_all([record for record, _ in records])
            except Exception as exc:  # noqa: BLE001 (the leases lapse; check() says so to the writers)
                log.warning("lease renewal of %d partitions failed: %s", len(renewing), exc)
                continue
            parts = renewing[0].log.state.parts
            for (_, leases), every in zip(records, effective, strict=True):
                for lease in leases:  # a record not renewed in full: each lease as the log holds it now
                    if every or parts.get(lease.scope, {}).get("holder") == lease.holder:
                        lease._confirmed = sent
                    else:
                        log.warning("%s: the lease of %s was taken over; this copier stops writing", lease.scope,
                                    lease.holder)
                        lease._lost = True


def renewals(leases: Sequence[PartitionLease]) -> list[tuple[dict, list[PartitionLease]]]:
    """The records that renew `leases`, with the leases each renews: one `lease-renewal` record for up to
    RENEWAL_LEASES leases of the same process, run and length (a record a lease made each renewal
    cost a task of 10,024 partitions over a second of the GIL every six seconds, its copies and
    writes in step stalled meanwhile, and filled the log to a snapshot at each renewal)."""
    alike: dict[tuple, list[PartitionLease]] = {}
    for lease in leases:
        shared = tuple(sorted((k, v) for k, v in lease._base.items() if k not in ("scope", "holder")))
        alike.setdefault(shared, []).append(lease)
    records = []
    for shared, group in alike.items():
        for at in range(0, len(group), RENEWAL_LEASES):
            chunk = group[at:at + RENEWAL_LEASES]
            records.append(({**dict(shared), "kind": "lease-renewal",
                             "holders": {lease.scope: lease.holder for lease in chunk}}, chunk))
    return records


def acquire_all(leases: Sequence[PartitionLease]) -> None:
    """Claim the leases not held yet, all in one append and one read of the claims log, and renew
    them together; those that did not take effect (another holder) are left to their own
    `acquire`, which waits for it."""
    wanted = [lease for lease in leases if not lease.held()]
    if not wanted:
        return
    for lease in wanted:
        lease._stop_renewer()
    ends = _target_ends(wanted) if wanted[0]._young_log() else {}
    sent = time.monotonic()
    outcomes = wanted[0].log.submit_all([lease._claim(empty=ends.get(lease.scope) == 0) for lease in wanted])
    took = [lease for lease, effective in zip(wanted, outcomes, strict=True) if effective]
    if took:
        renewer = _Renewer(took)
        for lease in took:
            lease._took(sent, renewer)


def release_all(leases: Sequence[PartitionLease]) -> None:
    """Stop renewing the leases and release those held, in one append (a lease whose release is
    lost runs out after lease_s)."""
    for lease in leases:
        lease._stop_renewer()
    held = [lease for lease in leases if lease._confirmed != -float("inf")]
    if not held:
        return
    try:
        held[0].log.submit_all([{**lease._base, "kind": "lease-release"} for lease in held])
    except Exception as exc:  # noqa: BLE001 (they run out after lease_s)
        log.warning("lease release of %s failed (%s): they run out after %.0f s",
                    ", ".join(lease.scope for lease in held), exc, held[0].lease_s)
    for lease in held:
        lease._confirmed = -float("inf")


def _target_ends(leases: Sequence[PartitionLease]) -> dict[str, int]:
    """Each lease's target partition's end offset (one request for all), by scope."""
    with shared_admin(leases[0].log.cluster) as admin:
        ends = admin.end_offsets([(lease.topic, lease.partition) for lease in leases], retry=True)
    return {lease.scope: ends[(lease.topic, lease.partition)] for lease in leases}


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), to tell a reused process id apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _gone(holder: dict[str, Any]) -> bool:
    """Whether the lease's holder process has ended (known only on the same host)."""
    if holder.get("host") != socket.gethostname() or not holder.get("pid"):
        return False
    return _started(holder["pid"]) != holder.get("started")
