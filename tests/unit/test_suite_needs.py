"""The table of what each test needs (tests/support/needs.py) stays true to the tree: each folder and
module it names is there, each marker it sets is declared in pyproject.toml (--strict-markers), each
fixture it reads is defined in a conftest.py, and make test-unit selects the tests that need none."""
from __future__ import annotations

import re
import tomllib

from tests.support.needs import BY_FIXTURE, MARKERS, NEEDS, UNIT, needs
from tests.support.stack import PROJECT_DIR


def test_each_folder_and_module_named_is_there():
    assert not [path for path in NEEDS if not (PROJECT_DIR / path).exists()]


def test_each_marker_is_declared_and_each_one_set_is_a_marker():
    declared = {line.split(":")[0] for line in
                tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(MARKERS) <= declared
    assert set().union(*NEEDS.values(), *BY_FIXTURE.values()) == set(MARKERS)


def test_each_fixture_read_is_defined_in_a_conftest():
    defined = {name for path in (PROJECT_DIR / "tests").rglob("conftest.py")
               for name in re.findall(r"^def (\w+)\(", path.read_text(), re.M)}
    assert set(BY_FIXTURE) <= defined


def test_a_test_needs_its_folders_its_modules_and_its_fixtures():
    assert needs(PROJECT_DIR / "tests/faults/test_writers.py", []) == {"stack", "multi_broker", "spark"}
    assert needs(PROJECT_DIR / "tests/badinput/test_params.py", ["tmp_path"]) == set()
    assert needs(PROJECT_DIR / "tests/badinput/test_params.py", ["dagbag", "airflow_db", "dag_spark_server"]) == {
        "airflow", "spark"}
    assert needs(PROJECT_DIR / "tests/integrationx/test_a.py", []) == set()  # a folder, not a prefix


def test_make_test_unit_runs_the_tests_that_need_none():
    recipe = re.search(r"^test-unit:.*\n\t(.*)$", (PROJECT_DIR / "Makefile").read_text(), re.M).group(1)
    assert f'-m "{UNIT}"' in recipe
