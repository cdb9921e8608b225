"""A JSON line a pair of versions, then one JSON object of them all, from what the compat migrations
recorded (tests/dags/test_compat_migration.py): per pair (source -> target), partitions,
partitions_equal, groups, groups_exact, connectors, connectors_resumed, and how the connectors were
stopped and whether their offsets on the target equal the source's (the old message formats' run:
the configs Kafka 4 removed that it mapped). Exit 1 when none ran or one is not all equal, exact and
resumed."""
from __future__ import annotations

import json
import sys

from tests.support import results

FIGURES = ("partitions", "partitions_equal", "groups", "groups_exact", "connectors", "connectors_resumed",
           "connector_offsets_equal", "stopped_by", "configs_mapped")


def complete(row: dict) -> bool:
    return (row["run_state"] == "success" and row["partitions"] and row["partitions"] == row["partitions_equal"]
            and row["groups"] == row["groups_exact"] and row["connectors"] == row["connectors_resumed"]
            and row.get("connector_offsets_equal") is True)


def main(path: str) -> int:
    rows = results.read(path)
    summary = {row.get("pair", row["source_version"]): {k: row[k] for k in FIGURES if k in row} for row in rows}
    for pair, figures in summary.items():
        print(json.dumps({"pair": pair, **figures}))
    print(json.dumps(summary))
    return 0 if rows and all(complete(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
