"""The copy engine (docs/DESIGN.md §4): one partition from the source cluster to the target, every
record at its offset (preserve) or with an exact offset map (translate). `copy_partition` in
`kmigrate.copy.partition` is where a copy starts."""
