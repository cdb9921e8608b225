"""Spark adapters of the kmigrate jobs: the session, work units as Spark tasks, the executors'
Python daemon, the launch settings, and the jobs' driver side that the scripts of spark_jobs/ call
(job_args, guards, copy_job, verify_job). The core library (kmigrate) imports none of this."""
