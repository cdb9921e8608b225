"""stack/stack.py runs with the system python3 before the virtualenv exists (make kafka-jars,
make stack-up): it and every module it loads import the standard library only."""
from __future__ import annotations

import subprocess
import sys

from tests.support.stack import PROJECT_DIR


def test_stack_py_and_its_modules_load_without_site_packages():
    # -S: no site-packages, so a third-party import fails; -I: nor this project's folders on sys.path
    done = subprocess.run([sys.executable, "-I", "-S", str(PROJECT_DIR / "stack" / "stack.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stack.py {install,up,down,status,run}" in done.stdout
