"""Airflow glue for the kmigrate DAGs (on sys.path as Airflow's plugins folder):

- `hooks`: the project's connections (Kafka clusters, Kafka Connect clusters) as kmigrate clients.
- `operators`: the Spark submit operator of the jobs, and the DAGs' Spark task factory.
- `params`: the DAGs' shared task defaults and trigger-form params.
- `steps`: the non-Spark steps of the DAGs as tasks.
"""
