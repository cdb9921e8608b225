"""A catch-up round (kafka_migration's wait_for_cutover sensor runs one a poke until the cutover
time): the pre-copy plan's partitions copied up to the source's ends now, then verified while the
source is live, so that the target stays within one round of the live source. A run that has
stopped its connectors gets no round (the window copy follows).

    spark-submit --master 'local[*]' spark_jobs/catch_up.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

The round is recorded as the next pre-copy round. Exit 0 when every partition was copied (or no
round was due), 1 naming the partitions that failed, 2 when the job could not start (bad input).
The course: kmigrate_spark.copy_job.catch_up.
"""
import sys

from kmigrate_spark.copy_job import catch_up
from kmigrate_spark.job_args import copy_arguments

if __name__ == "__main__":
    sys.exit(catch_up(copy_arguments(__doc__).parse_args()))
