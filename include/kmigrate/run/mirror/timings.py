"""A mirror's timings checked each on its own and against each other, before a mirror starts
(`MirrorSpec.check`) and in the mirror DAG's preflight, where the follower's `stale_after_s` is known
too (`check_timings`).

- `interval_s`, how often the driver reads both clusters' ends and writes its status (its
  heartbeat), at least MIN_INTERVAL_S: each status round is two ListOffsets requests and a
  manifest write, and a loop that never pauses (1e-300 s) only loads both clusters and the state
  location; at most an hour.
- `refresh_s`, how often the selection is read again, at least `interval_s`: the driver looks at it
  once a status round, so a shorter refresh is not kept and only hides what the mirror does.
- `stale_after_s`, the heartbeat age at which the follower takes the mirror for dead and kills it,
  at least `min_stale_after_s(interval_s)`: STATUS_TIMEOUT_S (a status round whose reads waited out
  their timeout: a cluster slow, not gone) plus the longer of two intervals and BACKOFF_MAX_S (the
  pause after terms that keep failing). A shorter limit kills a healthy mirror whenever a cluster is
  slow for a moment, and its restart costs more than the slowness did."""
from __future__ import annotations

import math
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.run.mirror.status import STATUS_TIMEOUT_S

MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0
MAX_PERIOD_S = 86400.0  # the refresh, verification and term periods: at most a day
# a mirror's verification and term periods by default: of its spec (MirrorSpec) and its job's arguments alike. Its
# status interval, selection refresh and stale-after limit are params of the DR DAGs too: their defaults are the
# run request's (kmigrate.run.checks.request: INTERVAL_S, REFRESH_S, STALE_AFTER_S), which sits below the mirror
VERIFY_EVERY_S = 30.0
TERM_S = 3600.0
BACKOFF_MAX_S = 4.0  # the driver's longest pause between failed terms (driver.Mirror.BACKOFF_MAX_S)


def min_stale_after_s(interval_s: float) -> float:
    """The shortest heartbeat age a follower may take for a dead mirror of this `interval_s`."""
    return STATUS_TIMEOUT_S + max(2 * interval_s, BACKOFF_MAX_S)


# the smallest stale_after_s of any valid interval: the trigger form's minimum (the preflight checks the pair)
MIN_STALE_AFTER_S = min_stale_after_s(MIN_INTERVAL_S)


def seconds(value: Any, what: str) -> float:
    """`value` as a number of seconds; ConfigError naming `what` when it is no finite number (a
    string such as '1' included: the params give numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"the mirror's {what} is {type(value).__name__} {value!r}, not a number of seconds; "
                          "give a number such as 1.0")
    return float(value)


def check_timings(interval_s: Any, refresh_s: Any, verify_every_s: Any = VERIFY_EVERY_S, term_s: Any = TERM_S,
                  stale_after_s: Any = None) -> None:
    """ConfigError naming the timing out of its range, or the pair that does not fit (see the module)."""
    interval = seconds(interval_s, "status interval (interval_s)")
    refresh = seconds(refresh_s, "selection refresh (refresh_s)")
    verify = seconds(verify_every_s, "verification interval (verify_every_s)")
    term = seconds(term_s, "term (term_s)")
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise ConfigError(f"the mirror's status interval (interval_s) is {interval_s} s; give between {MIN_INTERVAL_S} "
                          f"and {MAX_INTERVAL_S:.0f} s (each round reads both clusters: a shorter one never pauses)")
    if not interval <= refresh <= MAX_PERIOD_S:
        raise ConfigError(f"the mirror's selection refresh (refresh_s) is {refresh_s} s; give between its status "
                          f"interval ({interval_s} s: the selection is looked at once a round) and "
                          f"{MAX_PERIOD_S:.0f} s")
    for value, given, what in ((verify, verify_every_s, "verification interval (verify_every_s)"),
                               (term, term_s, "term (term_s)")):
        if not 0 < value <= MAX_PERIOD_S:
            raise ConfigError(f"the mirror's {what} is {given} s; give more than 0 and at most {MAX_PERIOD_S:.0f} s")
    if stale_after_s is not None:
        check_stale_after(interval, stale_after_s, "restart limit", "the follower would kill it")


def check_stale_after(interval_s: float, stale_after_s: Any, what: str, then: str) -> None:
    """ConfigError when `stale_after_s` (the `what`: a follower's restart limit, a failover's stopped-
    after limit) is shorter than a healthy mirror of `interval_s` can go without a heartbeat; `then`
    says what would follow."""
    stale = seconds(stale_after_s, f"{what} (stale_after_s)")
    least = min_stale_after_s(interval_s)
    if stale < least:
        raise ConfigError(
            f"stale_after_s ({stale_after_s} s) is too short for the mirror's status interval ({interval_s:g} s): a "
            f"healthy mirror's heartbeat can be {least:g} s old ({STATUS_TIMEOUT_S:g} s of a slow cluster's reads, "
            f"plus {max(2 * interval_s, BACKOFF_MAX_S):g} s of pauses), and {then}; give stale_after_s of at least "
            f"{least:g} s, or a shorter interval_s")
