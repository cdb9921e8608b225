"""The steps of a migration run (docs/DESIGN.md §3), as plain functions over the run manifest and
the clusters: what the Airflow tasks and the Spark jobs call."""
