"""One JSON line from what the fault tests recorded (tests/support/faults.py `compare`): how many
faults were shown, how many passed, records compared and mismatches. Exit 1 when none ran or one failed."""
from __future__ import annotations

import sys

from tests.support import results


def summary_of(rows: list[dict]) -> dict:
    return {"faults": len(rows), "passed": sum(1 for r in rows if r["passed"]),
            **results.totals(rows, "records_compared", "mismatches")}


def main(path: str) -> int:
    return results.summarize(path, summary_of, lambda s: s["passed"] == s["faults"] and s["mismatches"] == 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
