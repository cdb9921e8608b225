"""Target topics: created like the source's, set for the copy, restored after it, kept in line with the source's config changes; topic configs across Kafka versions."""
