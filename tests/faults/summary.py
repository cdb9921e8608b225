"""One JSON line from what the fault tests recorded (tests/support/faults.py `compare`): how many
faults were shown, how many passed, records compared and mismatches. Exit 1 when none ran or one failed."""
from __future__ import annotations

import json
import sys

from tests.support import results


def main(path: str) -> int:
    rows = results.read(path)
    summary = {
        "faults": len(rows),
        "passed": sum(1 for r in rows if r["passed"]),
        "records_compared": sum(r["records_compared"] for r in rows),
        "mismatches": sum(r["mismatches"] for r in rows),
    }
    print(json.dumps(summary))
    return 0 if rows and summary["passed"] == summary["faults"] and summary["mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
