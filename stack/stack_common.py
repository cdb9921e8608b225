"""What every script of stack/ shares: the project's folder, the error a user can fix, and the one
wait that polls until a deadline. Standard library only (stack.py runs before the virtualenv exists)."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

PROJECT_DIR = Path(__file__).resolve().parent.parent

T = TypeVar("T")


class StackError(Exception):
    """A problem the user can fix; its message names it and the way out."""


def poll_until(condition: Callable[[], T], timeout_s: float, *, interval_s: float = 0.5,
               timed_out: Callable[[], BaseException] | None = None) -> T:
    """Call `condition()` every `interval_s` seconds until it returns something true, and return that.
    Once `timeout_s` seconds have passed: raise `timed_out()` if given, else return the last (false)
    value. The condition ends the wait early by raising (a process it watches has exited, say)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            break
        time.sleep(interval_s)
    if not value and timed_out is not None:
        raise timed_out()
    return value
