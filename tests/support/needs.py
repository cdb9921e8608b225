"""What each test needs besides this Python environment, said in one place. tests/conftest.py marks
every collected test with the markers of its folder, of its module and of the fixtures it uses
(NEEDS, BY_FIXTURE below); `pytest -m` selects by them, and `make test-unit` runs the tests with none
(UNIT). The markers are declared in pyproject.toml, whose --strict-markers refuses any other."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tests.support.stack import PROJECT_DIR

# each declared, with what it needs, in pyproject.toml
MARKERS = ("stack", "secure", "multi_broker", "compat", "airflow", "spark", "browser")

# `pytest -m` of the tests that need none of the above: no JVM, no Kafka, no Airflow database
UNIT = "not (" + " or ".join(MARKERS) + ")"

# By folder, and by module where a folder is mixed: a test needs its folder's and its module's. A module
# not named here needs only what its fixtures start (BY_FIXTURE): tests/unit, tests/stack but for two,
# the tests at the top of tests/, tests/dags/test_dag_integrity.py (the DAG files parsed, no database),
# test_spark_operator.py and test_spark_secrets.py (operators built, their command lines not run), and
# tests/badinput's modules of pure checks with a few stack cases (test_audit_checks, test_clients,
# test_form_schema, test_params, test_state).
NEEDS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "tests/integration": {"stack"},
    "tests/integration/test_spark_connect.py": {"spark"},  # a Spark Connect server of its own
    "tests/integration/test_spark_jobs.py": {"spark"},  # spark-submit, a standalone cluster
    "tests/secure": {"stack", "secure"},
    "tests/faults": {"stack", "multi_broker"},
    "tests/faults/test_process_faults.py": {"spark"},  # spark-submit
    "tests/faults/test_writers.py": {"spark"},  # spark-submit
    "tests/chaos": {"stack"},
    "tests/stack/test_kafka.py": {"stack"},
    "tests/stack/test_lifecycle.py": {"stack"},  # a one-cluster stack of its own
    "tests/badinput/test_claims_records.py": {"stack"},
    "tests/badinput/test_connect_names.py": {"stack"},
    "tests/badinput/test_destructive.py": {"stack"},
    "tests/badinput/test_known.py": {"stack"},
    # the DAG runs: dag.test() on the Airflow database, Spark jobs on the DAG tests' Spark Connect server
    "tests/dags/test_airflow_up.py": {"stack", "airflow"},  # make airflow-up's api-server and scheduler
    "tests/dags/test_compat_migration.py": {"stack", "compat", "airflow", "spark"},
    "tests/dags/test_cutover_course.py": {"stack", "airflow", "spark"},
    "tests/dags/test_dr_drill.py": {"stack", "airflow", "spark"},
    "tests/dags/test_dr_mirror.py": {"stack", "airflow", "spark"},
    "tests/dags/test_dr_unplanned.py": {"stack", "airflow", "spark"},  # and a one-broker source of its own
    "tests/dags/test_hooks.py": {"stack", "airflow"},
    "tests/dags/test_kafka_migration.py": {"stack", "airflow", "spark"},
    "tests/dags/test_live_source.py": {"stack", "airflow", "spark"},
    "tests/dags/test_secure_migration.py": {"stack", "secure", "airflow", "spark"},
    "tests/dags/test_source_changes.py": {"stack", "airflow", "spark"},
    "tests/dags/test_streams_migration.py": {"stack", "airflow", "spark"},
    "tests/dags/test_trigger_form.py": {"stack", "airflow", "spark", "browser"},  # the UI's api-server and scheduler
}.items()}

# What the shared fixtures start (tests/conftest.py and the folders' conftest.py): a test that uses one,
# itself or through another fixture, needs it too (in the mixed modules above, only some tests do).
BY_FIXTURE: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "stack": {"stack"},
    "secure_stack": {"stack", "secure"},
    "multi_stack": {"stack", "multi_broker"},
    "airflow_db": {"airflow"},
    "dag_spark_server": {"spark"},
}.items()}


def needs(path: Path, fixturenames: Iterable[str]) -> set[str]:
    """The markers of a test in the file at `path` that uses the fixtures `fixturenames`."""
    where = path.resolve().relative_to(PROJECT_DIR).as_posix()
    found = {name for key, names in NEEDS.items() if where == key or where.startswith(key + "/") for name in names}
    return found.union(*(BY_FIXTURE.get(name, ()) for name in fixturenames))
