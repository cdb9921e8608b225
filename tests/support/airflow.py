"""A throw-away local Airflow (SQLite, this project's dags/ and plugins/, connections for the local
stack and for the compat profile's clusters) for the DAG tests, and a DAG run with `dag.test()`. Its
environment is set when this module is first imported: tests/dags/conftest.py and
tests/badinput/conftest.py import it before any of their test modules imports Airflow, which reads
its configuration on first import. The airflow_db and dagbag fixtures are in tests/conftest.py."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.support.stack import PROJECT_DIR, STACK_DIR

sys.path.insert(0, str(PROJECT_DIR / "plugins"))
sys.path.insert(0, str(STACK_DIR))

import local_airflow as local  # noqa: E402 - after the stack folder is on sys.path

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kmigrate-airflow-"))
# removed when this process ends, if no test's airflow_db did (as under make test-unit, which collects
# the DAG tests without running those that use it); not by a child forked from it
atexit.register(lambda pid=os.getpid(): os.getpid() == pid and shutil.rmtree(AIRFLOW_HOME, ignore_errors=True))
# the compat profile's clusters (an older source, stack.py --source-version) as connections compat_kafka_source, ...
COMPAT_CONNECTIONS = {name.replace("AIRFLOW_CONN_", "AIRFLOW_CONN_COMPAT_"): value for name, value in local.connections(
    "localhost:19392", "localhost:29392", "http://localhost:18383", "http://localhost:28383").items()}
# a one-broker source of tests/dags/test_dr_unplanned.py's own, killed by the test: connection lone_kafka_source
# and its Connect worker: lone_connect
_LONE = local.connections("localhost:19792", "localhost:29092", "http://localhost:18793", "http://localhost:28083")
LONE_CONNECTIONS = {"AIRFLOW_CONN_LONE_KAFKA_SOURCE": _LONE["AIRFLOW_CONN_KAFKA_SOURCE"],
                    "AIRFLOW_CONN_LONE_CONNECT": _LONE["AIRFLOW_CONN_CONNECT_SOURCE"]}
local.configure(AIRFLOW_HOME, {**local.connections("localhost:19092", "localhost:29092", "http://localhost:18083",
                                                   "http://localhost:28083"), **COMPAT_CONNECTIONS, **LONE_CONNECTIONS})


def run_dag(dagbag, dag_id: str = "kafka_migration", **conf):
    """One `dag.test()` run of a freshly parsed DAG with `conf` (a run's conf stays in the DAG object's
    params, so each run parses the DAG again). The trigger form's schema refuses a bad param here already."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=dagbag.dag_folder).get_dag(dag_id)
    return local.dag_test(dag, conf)


def returned(run, task_id: str):
    """What a task of a `dag.test()` run returned: its return_value XCom, as the Airflow UI's XCom tab shows it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, key="return_value", task_ids=task_id,
                                                 dag_ids=run.dag_id)).first()
        return None if row is None else XComModel.deserialize_value(row)


def task_states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def window_cells(run) -> dict[str, str]:
    """The state of each window step's grid cell (the mapped window_step task), by step."""
    return {ti.rendered_map_index: str(ti.state) for ti in run.get_task_instances() if ti.task_id == "window_step"}
