"""Kafka access: cluster admin, reading partitions and their digests, the raw protocol of the fast
paths, and the Kafka Connect REST client."""
