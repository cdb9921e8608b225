"""The DAG tests' local Airflow: importing tests/support/airflow.py sets its environment before any
test module here imports Airflow (which reads its configuration on first import). Its fixtures,
airflow_db and dagbag, are in tests/conftest.py (tests/badinput uses them too)."""
from __future__ import annotations

import tests.support.airflow  # noqa: F401 - the local Airflow's environment, set on import
