"""Prepare a running Spark Connect server for the kmigrate jobs: its first query (which loads its
SQL engine) and a Python worker a task slot, with kmigrate imported, in the jobs' shared session.
stack/spark_cluster.py connect-up runs it once the server listens.

    python spark_jobs/prepare_server.py sc://HOST:PORT
"""
from kmigrate_spark.conf import shown_remote
from kmigrate_spark.job_args import server_arguments
from kmigrate_spark.units import prepare_server, say

if __name__ == "__main__":
    remote = server_arguments(__doc__).parse_args().remote
    say("spark-connect", f"{shown_remote(remote)} ready for kmigrate jobs after {prepare_server(remote):.1f}s")
