"""Airflow glue for the kmigrate DAGs (on sys.path as Airflow's plugins folder):

- `hooks`: the project's connections (Kafka clusters, Kafka Connect clusters) as kmigrate clients.
- `operators`: the Spark submit operator of the jobs, the cutover sensor, and their factories.
- `launch`: how the operator and the sensor launch a Spark job (spark-submit or Spark Connect).
- `params`: the DAGs' shared task defaults and trigger-form params.
- `frame`: the run a step task works on, and the wrappers every step shares.
- `steps`: the non-Spark steps of the DAGs as tasks.
"""
