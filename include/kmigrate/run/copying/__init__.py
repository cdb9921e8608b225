"""The copy of a run's partitions: the plan of work units, the pre-copy rounds while the source is live, and what one Spark task does with one unit."""
