"""One JSON line from what the seeded runs recorded (tests/chaos/test_chaos.py): seeds run, passed,
pre-copy rounds, partitions and records compared, and the seeds that failed. Exit 1 when none ran or
one failed."""
from __future__ import annotations

import sys

from tests.support import results


def summary_of(rows: list[dict]) -> dict:
    return {"seeds": len(rows), "passed": sum(1 for r in rows if r["passed"]),
            **results.totals(rows, "rounds", "partitions_compared", "records_compared"),
            "failed_seeds": sorted(r["seed"] for r in rows if not r["passed"])}


def main(path: str) -> int:
    return results.summarize(path, summary_of, lambda s: not s["failed_seeds"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
