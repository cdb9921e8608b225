"""What the secure tests showed, for `make test-secure`'s last line: each test records its facts
(a JSON line appended to $KMIGRATE_SECURE_RESULTS; nothing when it is unset)."""
from __future__ import annotations

from tests import results

RESULTS_ENV = "KMIGRATE_SECURE_RESULTS"


def record(**facts: object) -> None:
    results.record(RESULTS_ENV, **facts)
