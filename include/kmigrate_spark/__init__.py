"""Spark adapters of the kmigrate jobs: the session, work units as Spark tasks, the executors'
Python daemon, the launch settings. The core library (kmigrate) imports none of this."""
