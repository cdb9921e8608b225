"""The cutover: the quiesce, the snapshot, the run's events (connectors stopped, resumed) and the consumer groups written on the target."""
