"""Kafka Connect connectors: stopped on the source, created on the target with their offsets, resumed, rolled back; workers older than 3.5; secrets kept out of the run's state."""
