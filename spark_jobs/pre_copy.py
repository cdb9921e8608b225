"""The pre-copy (kafka_migration's pre_copy task): the run's pre-copy plan copied while the source
is live, in rounds, each up to the source's end when it begins, until the source wrote at most
--converged-records offsets during a round (or --rounds were run). After each round, what it copied
is verified while the source is live, so that the cutover window reads again only what came after
the last round.

    spark-submit --master 'local[*]' spark_jobs/pre_copy.py --state-location ./state --run-id RUN \\
        --clients /path/clients.json --rounds 5 --converged-records 10000

Each round is recorded (parts pre-copy-rounds/, copy-results/, live-verification/). Exit 0 when
every partition was copied, 1 naming the partitions that failed, 2 when the job could not start
(bad input). The course: kmigrate_spark.copy_job.pre_copy.
"""
import sys

from kmigrate_spark.copy_job import pre_copy
from kmigrate_spark.job_args import pre_copy_arguments

if __name__ == "__main__":
    sys.exit(pre_copy(pre_copy_arguments(__doc__).parse_args()))
