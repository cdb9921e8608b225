#!/usr/bin/env python3
"""Debian's Prometheus (the server and promtool) for the local stack, unpacked from Debian's package into
.cache/ without installing it (no root needed, no service started): `apt-get download`, then
`dpkg-deb -x`. The version is pinned by its upstream release (PROMETHEUS_VERSION): whichever Debian
revision of it the archive serves is taken, and another release is refused.

    python3 stack/prometheus_install.py     # once; prints the folder; offline afterwards

Standard library only, like stack.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack_common import StackError  # noqa: E402
from stack_install import CACHE_DIR  # noqa: E402

PROMETHEUS_VERSION = "2.42.0"  # Debian 12's; its promtool tests the alert rules (monitoring/)


def home() -> Path:
    return CACHE_DIR / f"prometheus-{PROMETHEUS_VERSION}"


def promtool() -> Path:
    return home() / "usr" / "bin" / "promtool"


def install() -> Path:
    """The unpacked package in home(); a no-op once complete. StackError naming what failed and the way out."""
    target = home()
    if (target / ".complete").exists():
        return target
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise StackError("apt-get and dpkg-deb not found: Prometheus is taken from Debian's package; on another "
                         f"system put Prometheus {PROMETHEUS_VERSION} (prometheus and promtool) in {target}/usr/bin "
                         "and create the file .complete there")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
        download = ["apt-get", "download", "-q", "prometheus"]
        done = subprocess.run(download, cwd=scratch, capture_output=True, text=True)
        if done.returncode != 0 and os.geteuid() == 0:  # a machine whose package lists were never fetched
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
            done = subprocess.run(download, cwd=scratch, capture_output=True, text=True)
        debs = sorted(Path(scratch).glob("prometheus_*.deb"))
        if done.returncode != 0 or not debs:
            raise StackError(f"apt-get download prometheus failed ({(done.stdout + done.stderr).strip()[-500:]}); "
                             "as root, run apt-get update once, then make install again")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(partial)], check=True, capture_output=True)
    version = subprocess.run([str(partial / "usr" / "bin" / "promtool"), "--version"], capture_output=True,
                             text=True).stdout
    if f"version {PROMETHEUS_VERSION}" not in version:
        raise StackError(f"Debian's archive serves another Prometheus than {PROMETHEUS_VERSION} ({version.splitlines()[:1]}); "
                         "update PROMETHEUS_VERSION in stack/prometheus_install.py and the alert rules' tests")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").write_text(PROMETHEUS_VERSION + "\n")
    return target


if __name__ == "__main__":
    try:
        print(install())
    except StackError as exc:
        print(f"make: {exc}", file=sys.stderr)
        sys.exit(2)
