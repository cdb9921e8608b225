"""Every dependency is pinned, and the installed versions are the pinned ones."""
from __future__ import annotations

import re
from importlib import metadata

from tests.support.stack import PROJECT_DIR


def requirement_lines() -> list[str]:
    lines = (PROJECT_DIR / "requirements.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def test_every_requirement_is_pinned():
    unpinned = [ln for ln in requirement_lines() if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", ln)]
    assert not unpinned, f"pin these with ==: {unpinned}"


def test_installed_versions_are_the_pins():
    wrong = {}
    for line in requirement_lines():
        name, version = line.split("==")
        if metadata.version(name) != version:
            wrong[name] = (metadata.version(name), version)
    assert not wrong, f"installed (got, pinned): {wrong}; run `make install`"


def test_pyspark_python_files_are_the_pinned_release():
    # pyspark-client (pulled in by the Spark provider) ships an older copy of the same package.
    import pyspark

    assert pyspark.__version__ == metadata.version("pyspark")
