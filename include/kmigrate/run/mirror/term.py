"""A term of the mirror's copy (docs/DESIGN.md §12): the driver numbers its terms and writes the
running one in the run manifest's `mirror-term` part; its tasks copy their partitions until the
term's deadline, until the run's mirror is asked to stop (`request_stop`), or until the driver ends
it (the part says so, or names another term: the selection changed, a driver started again). A
task reads that part on a thread of its own (`Ended`) and checks a flag before each write (a copy
cut short raises `TermEnded`). Pure Python."""
from __future__ import annotations

import dataclasses
import threading
import time

from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest, Part
from kmigrate.run.records import timeline

TERM = "mirror-term"  # the driver's term: {"term": n, "ended": bool}; another n, or ended, ends term n
STOP = Part.event("mirror-stop-requested")  # a failover (or a user) asks the mirror to stop


class TermEnded(KmigrateError):
    """A copy stopped before a write because its term ended (not the partition's failure)."""


@dataclasses.dataclass(frozen=True)
class Term:
    """A term of the mirror's copy: its number, at most `seconds` long, one round when `once`; the run
    manifest at `state_location` (None: not readable from here) tells it to end early."""

    number: int
    run_id: str
    seconds: float
    state_location: str | None = None
    once: bool = False
    poll_s: float = 0.05
    verify_every_s: float | None = None
    check_every_s: float = 0.2  # the manifest read at most this often


class Ended:
    """Whether the term has been ended (the run's stop requested, or a later term begun), read from
    the run manifest now and then every `check_every_s` on a thread of its own, so that the check
    before each write reads a flag (a manifest on an object store answers in tens of milliseconds);
    never, when the manifest cannot be read here."""

    def __init__(self, term: Term) -> None:
        self._ended, self._closed = threading.Event(), threading.Event()
        try:
            manifest = Manifest(term.state_location, term.run_id) if term.state_location is not None else None
        except KmigrateError:
            manifest = None
        if manifest is not None and not self._read(manifest, term):
            threading.Thread(target=self._watch, args=(manifest, term), name="mirror-term-watch", daemon=True).start()

    def __call__(self) -> bool:
        return self._ended.is_set()

    def close(self) -> None:
        self._closed.set()

    def _watch(self, manifest: Manifest, term: Term) -> None:
        while not self._closed.wait(term.check_every_s) and not self._read(manifest, term):
            pass

    def _read(self, manifest: Manifest, term: Term) -> bool:
        try:
            running = manifest.read(TERM) or {}
            if (manifest.exists(STOP) or running.get("term", term.number) != term.number
                    or bool(running.get("ended"))):
                self._ended.set()
        except KmigrateError:  # read again at the next
            pass
        return self._ended.is_set()


def request_stop(manifest: Manifest, why: str) -> None:
    """Ask the run's mirror to stop after its current round (idempotent: the first request stays)."""
    manifest.get_or_create(STOP, lambda: {"at": timeline.iso(time.time()), "why": why})
