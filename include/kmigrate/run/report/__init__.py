"""What a run reports: the report written next to its manifest (its steps and the cutover window read from the timeline), a DR drill's RPO and RTO."""
