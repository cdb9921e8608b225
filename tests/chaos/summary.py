"""One JSON line from what the seeded runs recorded (tests/chaos/test_chaos.py): seeds run, passed,
pre-copy rounds, partitions and records compared, and the seeds that failed. Exit 1 when none ran or
one failed."""
from __future__ import annotations

import json
import sys

from tests.support import results


def main(path: str) -> int:
    rows = results.read(path)
    summary = {
        "seeds": len(rows),
        "passed": sum(1 for r in rows if r["passed"]),
        "rounds": sum(r["rounds"] for r in rows),
        "partitions_compared": sum(r["partitions_compared"] for r in rows),
        "records_compared": sum(r["records_compared"] for r in rows),
        "failed_seeds": sorted(r["seed"] for r in rows if not r["passed"]),
    }
    print(json.dumps(summary))
    return 0 if rows and not summary["failed_seeds"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
