"""The continuous mirror (kafka_dr_mirror starts it): the selected topics kept on the DR cluster at
the source's offsets while the source is live, by long-running copy tasks (one a task slot, each
copying its partitions for a term), with the consumer groups'
offsets (never past the DR cluster's ends) and the mirror's status (heartbeat, lag a partition)
in the run manifest, until a failover or SIGTERM stops it.

    spark-submit --master 'local[*]' spark_jobs/mirror.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json --topics 'orders\\..*'

Exit 0 once stopped, 2 when it could not start (bad input). The course:
kmigrate_spark.mirror_job.mirror.
"""
import sys

from kmigrate_spark.job_args import mirror_arguments
from kmigrate_spark.mirror_job import mirror

if __name__ == "__main__":
    sys.exit(mirror(mirror_arguments(__doc__).parse_args()))
