"""Claims kept on the target cluster: which run holds which topics, and which copier writes which
partition (docs/DESIGN.md §4.7). A module a concept: the records' shapes (`records`), the fold
(`state`), the log (`log`), runs' claims on their topics (`runs`), copiers' leases on partitions
(`leases`) and the CLI (`cli`).

The claims are records of one single-partition topic on the target, `kmigrate-claims`, stamped by
the broker (LogAppendTime). Every claim is appended first and decided after: each reader folds the
same records in the same log order with the same rule (`Claims.apply`), so all agree on which claim
took effect, with no coordinator and no clock but the partition leader's.

- A run claims its topics before its first write (`kmigrate.claims.runs`). A run is its name and
  its deployment (the state location of its manifest: a name and a location are one manifest, which
  every DAG of the run shares, a mirror and its failover alike): the same run name of another
  Airflow deployment, with its own state location, is another run. The claim takes effect unless
  another run holds one of them; it stays through failures and retries, and is released when the
  run ends (the report, by its own deployment) or by hand (`python -m kmigrate.claims release RUN`,
  `--force` for a run of a deployment: `kmigrate.claims.cli`). The log also keeps which source
  clusters ever claimed runs on it (`received_from`), through releases.
- A copier leases the partition it writes (`kmigrate.claims.leases`). A lease takes effect when the
  partition is free, its lease ran out (no renewal for `lease_s` by the broker's clock), or its
  holder's process is gone (seen by a claimant on the same host). The holder renews it every
  `lease_s / 5` and stops writing when no renewal has been confirmed for `lease_s / 2`, well before
  anyone may take it over.
- The log is kept short (`kmigrate.claims.log`): a reader that has folded SNAPSHOT_AFTER records
  since the last snapshot (or the log's start) appends the state it folded as a snapshot, in records
  (chunks) of at most SNAPSHOT_CHUNK_BYTES, which takes effect only where nothing landed between its
  fold and it (its chunks at `through`, `through + 1`, ...: the first chunk's offset is `through`),
  all of it once its last chunk is read; then it deletes the records below the snapshot before it
  (below its first chunk). A process that starts later reads at most twice SNAPSHOT_AFTER records,
  from a snapshot on, not the whole history (a mirror's renewals alone add one record a partition
  every 6 s); the last SNAPSHOT_AFTER records stay readable as they were.
- Every record is untrusted: any process with Write on the topic, of any version, may have written
  it. A record whose shape the fold cannot read (`kmigrate.claims.records`) is skipped by every
  reader alike, with a warning naming its offset; it never stops the fold.

The fold itself is `kmigrate.claims.state`, pure logic."""
