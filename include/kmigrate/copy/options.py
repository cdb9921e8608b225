"""How a partition is copied: the options every copy takes (docs/DESIGN.md §4)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class CopyOptions:
    run_id: str = "default"
    check_every: int = 5000          # delivery reports checked: first and last of each chunk of this size
    resume_window: int = 64          # target records compared with the source before resuming
    idle_timeout_s: float = 30.0
    verify: bool = True              # read both sides back and compare digests over [log start, end)
    live: bool = False               # a pre-copy round: a log start moved past the unit's end is aligned to
    fast_alignment: bool = True      # hand-built filler batches (raw connection); else the producer
    raw_batches: bool = True         # copy plain record batches whole (raw connection); else record by record
    fetch_max_bytes: int = 16 << 20  # per fetch of whole batches
    max_message_bytes: int = 1_048_576 + 65_536
    producer_overrides: tuple[tuple[str, Any], ...] = ()
    target_configs: Mapping[str, Mapping[str, str]] | None = None  # {topic: its configs}, read for a task at once
    # test hooks: called with the count of records handed to the producer so far; with the name of
    # a step about to happen ("gap-transaction-open": fillers written in a transaction not ended
    # yet; "fillers-written": alignment fillers written, DeleteRecords next; "commit-record-written":
    # a record written, the commit marker after it next)
    progress_hook: Callable[[int], None] | None = None
    step_hook: Callable[[str], None] | None = None
    # how long a copy keeps resuming after transient errors (leaders moving, brokers restarting)
    retry_for_s: float = 180.0
    # the copier's lease on the target partition (kmigrate.claims): its length, and its check,
    # called before each write; it raises CopyInterrupted when the lease is not known to be held
    lease_s: float = 30.0
    guard: Callable[[], None] | None = None
    # where this copier's last copy of the partition left the target's end, committed (a mirror's task): a target
    # ending there holds nothing written since, so neither the fence nor the resume check is needed
    continues_at: int | None = None
    # (source log start, source last stable offset, target log start, target high watermark) as the caller
    # read them just before this copy (a mirror's pass, for all its partitions at once): not read again; the
    # target's are taken only by a copy that continues at that high watermark
    ends_read: tuple[int, int, int, int] | None = None
    # a copier's raw producer (wire.Idempotence) kept from one copy of a partition to the next (a mirror's
    # task): a list of at most one, empty until a copy has one; a copy takes it out and puts it back only when
    # every batch it sent landed where expected, so an attempt that fails leaves the next a new producer id
    raw_producer: list[Any] | None = None
    # the record path's producer created with the copy's writer (its producer id comes in the background), or
    # on first use: a copy expected to write whole batches only (a mirror's, whose last copy did) saves it
    eager_producer: bool = True

    def may_write(self) -> None:
        if self.guard is not None:
            self.guard()

    def reached(self, step: str) -> None:
        if self.step_hook is not None:
            self.step_hook(step)
