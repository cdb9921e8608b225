"""Facts a group of tests records for its make target's last line: each test appends a JSON line to
the file named by an environment variable (nothing when it is unset)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

# the secure tests' file (tests/secure, tests/dags/test_secure_migration.py; `make test-secure`)
SECURE_RESULTS_ENV = "KMIGRATE_SECURE_RESULTS"


def record(env: str, **facts: object) -> None:
    path = os.environ.get(env)
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(facts) + "\n")


def summarize(path: str, summary_of: Callable[[list[dict]], dict], met: Callable[[dict], bool]) -> int:
    """A make target's last line: one JSON object made by `summary_of` from the rows recorded at
    `path`; 0 when some were recorded and the summary `met` the target's bar, else 1."""
    rows = read(path)
    summary = summary_of(rows)
    print(json.dumps(summary))
    return 0 if rows and met(summary) else 1


def totals(rows: list[dict], *keys: str) -> dict[str, int]:
    """Each of `keys` summed over `rows`."""
    return {key: sum(r[key] for r in rows) for key in keys}


def read(path: str) -> list[dict]:
    """What was recorded to `path` (nothing when it does not exist)."""
    file = Path(path)
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []
