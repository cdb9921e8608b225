"""Copy every partition of a run's plan from the source cluster to the target, each partition's
digest compared with the source's after its copy: the plain copy, for tests, benchmarks and runs by
hand (the DAGs run pre_copy.py, catch_up.py, window_copy.py and drill_copy.py).

    spark-submit --master 'local[*]' spark_jobs/copy_partitions.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

--clients is a JSON file {"source": {...}, "target": {...}} of librdkafka settings, mode 600 (secrets
never travel on the command line; default: $KMIGRATE_CLIENTS_JSON). With --remote sc://HOST:PORT,
run it with python as a client of that Spark Connect server. Before any task starts, both clusters
must answer, every topic of the plan must exist on the source, and each target topic is created
like the source's (or checked). Each partition is one work unit of a Spark task running the
kmigrate copier, which resumes from the target's end. The rows go to the run manifest as part
copy-results/<attempt>. Exit 0 when every partition was copied, 1 naming the partitions that
failed, 2 when the job could not start (bad input). The course: kmigrate_spark.copy_job.copy_plan.
"""
import sys

from kmigrate_spark.copy_job import copy_plan
from kmigrate_spark.job_args import copy_arguments

if __name__ == "__main__":
    sys.exit(copy_plan(copy_arguments(__doc__).parse_args()))
