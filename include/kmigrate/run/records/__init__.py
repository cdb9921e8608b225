"""The run's base records, which the steps of every other subpackage write and read: the timeline of its steps, its events (connectors stopped, resumed) and its snapshot read back."""
