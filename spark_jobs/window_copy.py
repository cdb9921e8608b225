"""The cutover window's copy (kafka_migration's copy_and_verify task): every partition of the run's
plan, as of the snapshot taken with the connectors stopped, then the verification of the plan in
the same Spark session, so that no second job starts inside the window. Ranges the pre-copy
verified while the source was live are not read again.

    spark-submit --master 'local[*]' spark_jobs/window_copy.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

Exit 0 when every partition was copied and verified equal, 1 naming the partitions that failed or
differ (a retry may help), 3 when the source holds records past the snapshot (it was written to
while stopped: a retry cannot help, nothing resumes on the target), 2 when the job could not start
(bad input). The course: kmigrate_spark.copy_job.window_copy.
"""
import sys

from kmigrate_spark.copy_job import window_copy
from kmigrate_spark.job_args import copy_arguments

if __name__ == "__main__":
    sys.exit(window_copy(copy_arguments(__doc__).parse_args()))
