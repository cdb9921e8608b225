"""What a run reports: the report written next to its manifest, the timeline of its steps and the cutover window, a DR drill's RPO and RTO."""
