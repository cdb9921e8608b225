"""A throw-away local Airflow (SQLite, this project's dags/ and plugins/, connections for the local
stack) for the DAG tests. Its environment is set when this file is imported, before any test
module imports Airflow, which reads its configuration on first import."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_DIR / "plugins"))
sys.path.insert(0, str(PROJECT_DIR / "stack"))

import local_airflow as local  # noqa: E402 - after the stack folder is on sys.path

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kmigrate-airflow-"))
# the compat profile's clusters (an older source, stack.py --source-version) as connections compat_kafka_source, ...
COMPAT_CONNECTIONS = {name.replace("AIRFLOW_CONN_", "AIRFLOW_CONN_COMPAT_"): value for name, value in local.connections(
    "localhost:19392", "localhost:29392", "http://localhost:18383", "http://localhost:28383").items()}
local.configure(AIRFLOW_HOME, {**local.connections("localhost:19092", "localhost:29092", "http://localhost:18083",
                                                   "http://localhost:28083"), **COMPAT_CONNECTIONS})


@pytest.fixture(scope="session")
def airflow_db():
    local.migrate_db(AIRFLOW_HOME)
    yield AIRFLOW_HOME
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_DIR / "dags"))
