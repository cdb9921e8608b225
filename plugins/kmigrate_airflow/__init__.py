"""Airflow glue for the kmigrate DAGs (on sys.path as Airflow's plugins folder):

- `hooks`: Airflow Connections into kmigrate clients; the Spark submit operator of the jobs.
- `steps`: the non-Spark steps of the DAGs as tasks.
- `local`: a throw-away local Airflow for the demo and the DAG tests.

This file imports nothing, so `local` can set Airflow's environment before Airflow is imported.
"""
