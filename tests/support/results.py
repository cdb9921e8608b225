"""Facts a group of tests records for its make target's last line: each test appends a JSON line to
the file named by an environment variable (nothing when it is unset)."""
from __future__ import annotations

import json
import os
from pathlib import Path

# the secure tests' file (tests/secure, tests/dags/test_secure_migration.py; `make test-secure`)
SECURE_RESULTS_ENV = "KMIGRATE_SECURE_RESULTS"


def record(env: str, **facts: object) -> None:
    path = os.environ.get(env)
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(facts) + "\n")


def read(path: str) -> list[dict]:
    """What was recorded to `path` (nothing when it does not exist)."""
    file = Path(path)
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []
