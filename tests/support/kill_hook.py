"""The tests' kill hook (tests/kill_hook_site/sitecustomize.py): what a process's environment needs
so that it, and the Spark Python workers it starts, SIGKILL a copy after N records of a partition."""
from __future__ import annotations

import os
from pathlib import Path

KILL_HOOK_ENV = "KMIGRATE_TEST_KILL_AFTER"
SITE = Path(__file__).resolve().parents[1] / "kill_hook_site"  # tests/kill_hook_site


def kill_hook_env(after: int, markers: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables to add to `base` (default: this process's environment): the hook's setting, and
    PYTHONPATH with the hook's folder first. A partition is killed once: `markers` keeps a file each."""
    base = os.environ if base is None else base
    path = os.pathsep.join([str(SITE), *([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])])
    return {KILL_HOOK_ENV: f"{after}:{markers}", "PYTHONPATH": path}
