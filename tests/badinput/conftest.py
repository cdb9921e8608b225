"""The bad-input cases run some inputs through the DAGs: the local Airflow of tests/dags is theirs too.
Importing tests/support/airflow.py sets its environment before any test module here imports Airflow;
its fixtures, airflow_db and dagbag, are in tests/conftest.py."""
import tests.support.airflow  # noqa: F401 - the local Airflow's environment, set on import
