"""The last line of `make test-bad-input`: one JSON object from what the cases recorded
(tests/support/badinput.py): kinds tried, clear errors, tracebacks and anything written before a
refusal. Exit 1 when none ran, or any case was not a clear error before any write."""
from __future__ import annotations

import sys

from tests.support import results


def summary_of(rows: list[dict]) -> dict:
    return {
        "tried": len(rows),
        "kinds": len({r["kind"] for r in rows}),
        "clear_errors": sum(1 for r in rows if r["clear"]),
        "tracebacks": sum(1 for r in rows if r["traceback"]),
        "written_before_refusal": sum(r["written"] for r in rows),
        "through_the_dag": sum(1 for r in rows if r["via"] == "dag"),
        # destructive steps (delete, stop, promote, write) pointed at the wrong cluster or past their opt-in
        "destructive_refused": sum(1 for r in rows if r.get("destructive") and r["clear"] and not r["written"]),
    }


def main(path: str) -> int:
    return results.summarize(path, summary_of, lambda s: s["clear_errors"] == s["tried"] and not s["tracebacks"]
                             and not s["written_before_refusal"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
