"""When the cutover is due: the `cutover_at` param read as an aware date-time, and whether it was
given with its zone (`read_cutover_at`: what the run request holds, the time the cutover sensor
waits for; `cutover_time`, the time alone: a recorded request's, as the run's metrics read it), and
the preflight's check of what was read (`check_cutover_at`)."""
from __future__ import annotations

import datetime

from kmigrate.errors import ConfigError

# the cutover sensor gives up 31 days after it starts waiting (plugins/kmigrate_airflow/operators.py)
CUTOVER_AT_MOST = datetime.timedelta(days=30)


def _example(now: datetime.datetime) -> str:
    return f"{now + datetime.timedelta(days=1):%Y-%m-%d}T22:00:00+00:00"


def _parse(value: str, now: datetime.datetime) -> datetime.datetime:
    try:
        return datetime.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"cutover_at {value!r} is not a date-time; give an ISO 8601 date-time with its zone, like "
                          f"{_example(now)} (or ...Z for UTC), or leave it empty to cut over as soon as the pre-copy "
                          "converges") from None


def read_cutover_at(value: str | None, now: datetime.datetime | None = None
                    ) -> tuple[datetime.datetime | None, bool]:
    """The `cutover_at` param as an aware date-time (None when empty), and whether it was given with
    its zone. ConfigError naming the param for anything else. A time without a zone (the preflight
    refuses it in a new run: `check_cutover_at`) is taken as UTC: a run recorded before zones were
    required continues as it was started."""
    if not value:
        return None, True
    at = _parse(value, now or datetime.datetime.now(datetime.timezone.utc))
    return (at, True) if at.tzinfo else (at.replace(tzinfo=datetime.timezone.utc), False)


def cutover_time(value: str | None) -> datetime.datetime | None:
    """The `cutover_at` param as an aware date-time (`read_cutover_at`); None when empty."""
    return read_cutover_at(value)[0]


def check_cutover_at(at: datetime.datetime | None, *, zoned: bool = True, started: bool = False,
                     now: datetime.datetime | None = None) -> datetime.datetime | None:
    """The preflight's check of `cutover_at` as read (`read_cutover_at`: the time, and whether it was
    `zoned`): a date-time with its zone (a time without one is refused rather than guessed: the
    operator's clock may not be UTC), and, for a run not started before (`started`: its request is
    recorded), in the future but within CUTOVER_AT_MOST (a past time would cut over at once, a later
    one outlast the wait). A started run re-triggered after its time continues: its cutover is due.
    Returns the time (None when empty)."""
    if at is None:
        return None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    shown = at.isoformat() if zoned else at.replace(tzinfo=None).isoformat()  # the time as read
    if not zoned:
        raise ConfigError(f"cutover_at {shown!r} has no time zone, so it is ambiguous; add +00:00 or Z for UTC (or the "
                          f"offset of the zone meant, like +01:00): for example {_example(now)}")
    if started:
        return at
    if at <= now:
        raise ConfigError(f"cutover_at {shown!r} is in the past (now is {now.isoformat(timespec='seconds')}); give a "
                          f"time ahead, like {_example(now)}, or leave it empty to cut over as soon as the pre-copy "
                          "converges")
    if at - now > CUTOVER_AT_MOST:
        raise ConfigError(f"cutover_at {shown!r} is more than {CUTOVER_AT_MOST.days} days ahead, longer than the run "
                          f"waits for it; trigger the run closer to the cutover (within {CUTOVER_AT_MOST.days} days)")
    return at
