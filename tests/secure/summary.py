"""One JSON line from the facts the secure tests recorded (to $KMIGRATE_SECURE_RESULTS, tests/support/results.py);
exit 1 when a fact is missing (its test did not run or did not get that far) or a target is not met."""
from __future__ import annotations

import json
import sys

from tests.support import results

KEYS = ("partitions", "partitions_equal", "groups_exact", "connectors_resumed", "source_writes_refused",
        "missing_acl_named", "secrets_found", "files_searched", "cmdline_samples", "acls_expected", "acls_on_target",
        "principals_missing_named", "quotas_expected", "quotas_on_target")


def main(path: str) -> int:
    facts: dict[str, object] = {}
    for row in results.read(path):
        facts.update(row)
    summary = {key: facts.get(key) for key in KEYS}
    print(json.dumps(summary))
    met = (None not in summary.values() and summary["partitions"] == summary["partitions_equal"]
           and summary["source_writes_refused"] is True and summary["missing_acl_named"] is True
           and summary["secrets_found"] == 0 and summary["acls_expected"] == summary["acls_on_target"]
           and summary["principals_missing_named"] is True
           and summary["quotas_on_target"] == summary["quotas_expected"] > 0)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
