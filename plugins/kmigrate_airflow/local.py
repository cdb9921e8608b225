"""A local Airflow for the demo and the DAG tests: a throw-away AIRFLOW_HOME with SQLite, this
project's dags/ and plugins/, connections for the local stack given as AIRFLOW_CONN_* environment
variables, and the copy pool. Import nothing from Airflow before `configure()` has run: Airflow
reads its configuration when it is first imported."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
COPY_POOL = "kafka_migration_copy"


def connections(source_bootstrap: str, target_bootstrap: str, source_connect: str, target_connect: str,
                spark_master: str = "local[2]") -> dict[str, str]:
    def http(url: str) -> str:
        scheme, rest = url.split("://", 1)
        host, _, port = rest.rstrip("/").partition(":")
        return json.dumps({"conn_type": "http", "host": host, "port": int(port or 80), "schema": scheme})

    return {
        "AIRFLOW_CONN_KAFKA_SOURCE": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": source_bootstrap}}),
        "AIRFLOW_CONN_KAFKA_TARGET": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": target_bootstrap}}),
        "AIRFLOW_CONN_CONNECT_SOURCE": http(source_connect),
        "AIRFLOW_CONN_CONNECT_TARGET": http(target_connect),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
    }


def configure(home: Path, conns: Mapping[str, str]) -> dict[str, str]:
    """Set the environment of this process (and its children) for a local Airflow at `home`."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_DIR / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_DIR / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # spark-submit and the Spark Python workers come from this interpreter's environment
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        **conns,
    }
    os.environ.update(env)
    if str(PROJECT_DIR / "plugins") not in sys.path:
        sys.path.insert(0, str(PROJECT_DIR / "plugins"))
    return env


def migrate_db(home: Path) -> None:
    """Create the SQLite metadata database (once per home) and the copy pool."""
    marker = home / ".kmigrate-db-ready"
    if marker.exists():
        return
    airflow = str(Path(sys.executable).parent / "airflow")
    for command in ([airflow, "db", "migrate"],
                    [airflow, "pools", "set", COPY_POOL, "2", "Spark copy and verify jobs of kafka_migration"]):
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[1:])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    marker.write_text("ok\n")
