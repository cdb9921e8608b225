"""The last line of `make test-bad-input`: one JSON object from what the cases recorded
(tests/support/badinput.py): kinds tried, clear errors, tracebacks and anything written before a
refusal. Exit 1 when none ran, or any case was not a clear error before any write."""
from __future__ import annotations

import json
import sys

from tests.support import results


def main(path: str) -> int:
    rows = results.read(path)
    summary = {
        "tried": len(rows),
        "kinds": len({r["kind"] for r in rows}),
        "clear_errors": sum(1 for r in rows if r["clear"]),
        "tracebacks": sum(1 for r in rows if r["traceback"]),
        "written_before_refusal": sum(r["written"] for r in rows),
        "through_the_dag": sum(1 for r in rows if r["via"] == "dag"),
    }
    print(json.dumps(summary))
    ok = rows and summary["clear_errors"] == summary["tried"] and not summary["tracebacks"]
    return 0 if ok and not summary["written_before_refusal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
