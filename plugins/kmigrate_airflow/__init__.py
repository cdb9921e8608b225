"""Airflow glue for the kmigrate DAGs (on sys.path as Airflow's plugins folder):

- `hooks`: the project's connections (Kafka clusters, Kafka Connect clusters) as kmigrate clients.
- `operators`: the Spark submit operator of the jobs, the cutover sensor, and their factories.
- `launch`: how the operator and the sensor launch a Spark job (spark-submit or Spark Connect).
- `params`: the DAGs' shared task defaults and trigger-form params.
- `frame`: the run a step task works on (from the run's typed request), and the wrappers every step shares.
- `steps`: the non-Spark steps of the DAGs as tasks.
- `cutover`, `failover`, `mirror`, `drill`: the window as one task, a failover's, the mirror's and a drill's tasks.
"""
