"""`make test` runs the suite in two pytest-xdist workers with --dist loadgroup, and relies on each
group (a module, or the tests sharing a stack profile) running in one worker: two workers starting
and stopping one stack at once fail each other's tests. tests/conftest.py writes the group into the
node id, since pytest-xdist's own way no longer works on pytest 9. This runs a few modules so and
checks that each ran whole in one worker."""
from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
MODULES = ["tests/unit/test_plan.py", "tests/unit/test_topics.py", "tests/unit/test_versions.py",
           "tests/unit/test_secrets.py"]


def test_each_module_runs_whole_in_one_worker():
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider", *MODULES], capture_output=True, text=True, cwd=PROJECT_DIR, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    workers = collections.defaultdict(set)
    for worker, module in re.findall(r"^\[(gw\d+)\].* PASSED (tests/[^:]+)::", done.stdout, re.M):
        workers[module].add(worker)
    assert set(workers) == set(MODULES), done.stdout[-3000:]
    assert all(len(w) == 1 for w in workers.values()), dict(workers)
