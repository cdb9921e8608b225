"""A step run again after a failure at each of its inner steps in turn: the moves' tests inject a
failure before each named function of the module doing the move, one attempt each, then let the move
run as it is and check that it went on from where it stood."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest


def failing_in_turn(monkeypatch: pytest.MonkeyPatch, module: ModuleType, steps: Sequence[str],
                    error: type[Exception], attempt: Callable[[], Any],
                    after_each: Callable[[str], None] = lambda step: None) -> tuple[Any, list[str]]:
    """`attempt()` once with each of `module`'s functions `steps` failing in turn with `error` (the
    attempt must raise it; `after_each(step)` checks what it left), then once as it is: what that last
    attempt returned, and the steps that failed, in the order they failed."""
    failed: list[str] = []
    for step in steps:
        real = getattr(module, step)

        def failing(*args: Any, _step: str = step, **kwargs: Any) -> Any:
            failed.append(_step)
            raise error(f"injected before {_step}")

        monkeypatch.setattr(module, step, failing)
        with pytest.raises(error, match=f"injected before {step}"):
            attempt()
        monkeypatch.setattr(module, step, real)
        after_each(step)
    return attempt(), failed
