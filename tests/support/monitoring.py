"""The shipped Grafana dashboard's queries, and a real Prometheus (Debian's, from `make install`)
scraping the exporter of a test's state location, to show that each query answers."""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until

sys.path.insert(0, str(PROJECT_DIR / "stack"))
import local_prometheus  # noqa: E402

DASHBOARD = PROJECT_DIR / "monitoring" / "grafana-dashboard.json"


def dashboard_queries(variable: str, run: str) -> list[str]:
    """The queries of the dashboard's panels that select by `$variable` (run for the mirrors'
    panels, migration for the runs'), with `run` in its place as Grafana puts it there: escaped for a
    regular expression (an Airflow run id holds `+` and `.`), in a PromQL string."""
    dashboard = json.loads(DASHBOARD.read_text())
    pattern = re.escape(run).replace("\\", "\\\\")
    return [t["expr"].replace(f"${variable}", pattern) for p in dashboard["panels"] for t in p.get("targets", [])
            if f'"${variable}"' in t["expr"]]


def value(url: str, expr: str) -> float | None:
    found = local_prometheus.query(url, expr)
    return float(found[0]["value"][1]) if found else None


def run_panels_answered(home: Path, state_location: str, run: str, *, port: int, exporter_port: int,
                        check: Callable[[Callable[[str], float | None]], None] | None = None) -> tuple[list[str], list[str]]:
    """(the runs' panels' queries for `run`, those a real Prometheus scraping the exporter of
    `state_location` answers) once it holds the run finished; `check` is given a function reading
    one value from it meanwhile."""
    monitoring = local_prometheus.Monitoring(home, state_location, port=port, exporter_port=exporter_port,
                                             scrape_s=1.0).start()
    try:
        read = lambda expr: value(monitoring.url, expr)  # noqa: E731
        wait_until(lambda: read(f'kmigrate_run_finished{{run="{run}"}}') == 1, f"Prometheus to hold run {run} finished", 60)
        if check is not None:
            check(read)
        queries = dashboard_queries("migration", run)
        return queries, [q for q in queries if local_prometheus.query(monitoring.url, q)]
    finally:
        monitoring.stop()
