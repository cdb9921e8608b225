"""The Python daemon of the Spark executors that run kmigrate tasks (spark.python.daemon.module).

Spark forks each Python worker from one daemon process a Spark executor (a Spark Connect server:
one a client session). Its own daemon imports no more than it needs, so every new worker imports
the library afresh: 0.3-0.5 s of CPU a worker, paid again after Spark stops a worker idle for a
minute (measured: 2.9 s to start four workers on two cores). This daemon imports the copier and
pyspark's worker module first, and the workers it forks start with both in memory.

Nothing imported here may start a thread (a forked child gets no copy of it): kmigrate,
confluent_kafka and pyspark.worker start none at import, pyarrow and pandas do, so they stay out.
"""
from __future__ import annotations

import gc

import pyspark.worker  # noqa: F401 - each worker's main loop, imported after the fork by default
from pyspark.daemon import manager

import kmigrate_spark.adapters  # noqa: F401 - the warm-up task, the copier, the verification and confluent_kafka

# pyspark's daemon makes each worker run a full gc.collect() after every task (measured: 25 ms with
# this library imported). Frozen, the imported modules' objects are left out of every collection
# (and their pages stay shared with the daemon's): the collection takes under 1 ms.
gc.freeze()

if __name__ == "__main__":
    manager()
