"""The bad-input cases run some inputs through the DAGs: the local Airflow of tests/dags is theirs too."""
from tests.dags.conftest import airflow_db, dagbag  # noqa: F401 - fixtures shared with tests/dags
