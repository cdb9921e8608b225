"""What the secure tests showed, for `make test-secure`'s last line: each test records its facts
(a JSON line appended to $KMIGRATE_SECURE_RESULTS; nothing when it is unset)."""
from __future__ import annotations

import json
import os

RESULTS_ENV = "KMIGRATE_SECURE_RESULTS"


def record(**facts: object) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(facts) + "\n")
