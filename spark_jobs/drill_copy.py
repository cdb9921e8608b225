"""The DR drill's copy (kafka_dr_drill's copy task): every partition of the run's plan, as of its
snapshot, from the source cluster to the DR cluster while the source stays live, without a digest
a partition: the drill's verify task (verify_partitions.py) follows and reads both sides.

    spark-submit --master 'local[*]' spark_jobs/drill_copy.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

A partition this run brought to its end already gets no task (a later drill copies only what
came since). Exit 0 when every partition was copied, 1 naming the partitions that failed, 2 when
the job could not start (bad input). The course: kmigrate_spark.copy_job.drill_copy.
"""
import sys

from kmigrate_spark.copy_job import drill_copy
from kmigrate_spark.job_args import copy_arguments

if __name__ == "__main__":
    sys.exit(drill_copy(copy_arguments(__doc__).parse_args()))
