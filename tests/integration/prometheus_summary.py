"""One JSON line from what the Prometheus test recorded (tests/integration/test_prometheus.py): whether a
real Prometheus scraped the mirror, its lag tracked the status file, the heartbeat alert fired and
cleared, and how many of the dashboard's queries returned data. Exit 1 when it did not run or fell short."""
from __future__ import annotations

import sys

from tests.support import results


def summary_of(rows: list[dict]) -> dict:
    last = rows[-1] if rows else {}
    return {k: last.get(k) for k in ("scraped", "lag_tracks", "alert_fired", "alert_cleared", "dashboard_queries",
                                     "dashboard_queries_with_data")}


def main(path: str) -> int:
    return results.summarize(path, summary_of, lambda s: bool(s["scraped"] and s["lag_tracks"] and s["alert_fired"]
                                                              and s["alert_cleared"] and s["dashboard_queries"]
                                                              and s["dashboard_queries"] == s["dashboard_queries_with_data"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
