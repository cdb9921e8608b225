"""The tests' one wait for a condition, with a deadline. The loop itself is stack/stack_common.py's
poll_until, the project's one poll (the stack scripts and bench/common.py's `poll` use it too)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from tests.support.stack import STACK_DIR

if str(STACK_DIR) not in sys.path:  # stack/'s modules import each other by name; stack.py appends its folder so too
    sys.path.append(str(STACK_DIR))

from stack_common import poll_until  # noqa: E402 - once stack/ is on sys.path

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 60.0, poll_s: float = 0.25, *,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """The first true value of `condition()`, asked every `poll_s` seconds; an AssertionError naming
    `what` once `timeout_s` have passed. An exception of a type in `ignore` counts as "not yet" (a
    cluster in the middle of a fault answers with errors for a while); any other ends the wait."""

    def attempt():
        try:
            return condition()
        except ignore:
            return None

    return poll_until(attempt, timeout_s, interval_s=poll_s,
                      timed_out=lambda: AssertionError(f"timed out after {timeout_s:g} s waiting for {what}"))
