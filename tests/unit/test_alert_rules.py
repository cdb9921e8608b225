"""The alert rules shipped for the mirrors (monitoring/alerts.yml) checked and unit-tested by Prometheus's
own promtool (monitoring/alerts_test.yml: each alert fires when it should and not before), and every
metric they name one the exporter serves (kmigrate.run.report.metrics). promtool comes with
`make install` (Debian's package, unpacked into .cache/)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kmigrate.run.report.metrics import families, run_families

PROJECT_DIR = Path(__file__).resolve().parents[2]
MONITORING = PROJECT_DIR / "monitoring"


def promtool() -> str:
    given = os.environ.get("PROMTOOL")
    if given:
        return given
    version = re.search(r'^PROMETHEUS_VERSION = "([^"]+)"', (PROJECT_DIR / "stack" / "prometheus_install.py").read_text(),
                        re.M).group(1)
    path = PROJECT_DIR / ".cache" / f"prometheus-{version}" / "usr" / "bin" / "promtool"
    assert path.exists(), f"{path} is missing: make install unpacks Debian's Prometheus there"
    return str(path)


def test_the_alert_rules_are_valid_and_their_tests_pass():
    checked = subprocess.run([promtool(), "check", "rules", "alerts.yml"], cwd=MONITORING, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool(), "test", "rules", "alerts_test.yml"], cwd=MONITORING, capture_output=True,
                            text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_metric_the_rules_name_is_served():
    served = {f.name for f in [*families([]), *run_families([])]}
    named = set(re.findall(r"\bkmigrate_[a-z_]+", (MONITORING / "alerts.yml").read_text()))
    assert named and named <= served, sorted(named - served)
