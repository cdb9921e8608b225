"""The demo and test workload: topics, groups and connectors seeded on a source cluster. Not part of
the migration library (kmigrate), which never imports it."""
