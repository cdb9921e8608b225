"""Verify every partition of a run's plan (kafka_dr_drill's verify task, or by hand): log start, log
end and content compared on the source and the target, one Spark task per partition, both clusters
read in parallel. Read-only on both.

    spark-submit --master 'local[*]' spark_jobs/verify_partitions.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

The table goes to the run manifest as part verification/<attempt>: one row per partition with both
sides' watermarks and digests, "equal", the problems found and which offsets were verified when.
Exit 0 when every partition is equal, 1 naming those that are not, 2 when the job could not start
(bad input). The course: kmigrate_spark.verify_job.verify_plan.
"""
import sys

from kmigrate_spark.job_args import verify_arguments
from kmigrate_spark.verify_job import verify_plan

if __name__ == "__main__":
    sys.exit(verify_plan(verify_arguments(__doc__).parse_args()))
