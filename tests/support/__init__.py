"""What the tests share, by theme: test modules and conftest.py files import helpers from here (and
from libraries), never from another test module or a conftest.py. Fixtures shared across folders are
defined in a conftest.py (tests/conftest.py, or the folder's), which takes its helpers from here too.

- stack.py        the project's folder, the one loader of stack/'s scripts by path, the stacks' dataclasses
- waiting.py      wait_until: the one poll with a deadline (stack/stack_common.py's poll_until)
- kafka.py        topics, produce and read back, watermarks, seeding plain and transactional records
- migration.py    what a migration must leave: partitions, topic configs, groups' offsets equal
- copier.py       the copier's own scenarios (run on the default stack and on older sources)
- connect.py      FileStream connectors, the copy step in this process, deleting connectors
- spark.py        spark-submit of the jobs and their results
- airflow.py      the throw-away local Airflow of the DAG tests, a DAG run and its task states
- faults.py       the 3-broker stack of the fault tests and their record-by-record comparison
- badinput.py     how a bad-input case states its refusal
- kill_hook.py    the environment that SIGKILLs a copy after N records (tests/kill_hook_site/)
- live_source.py  producers that keep writing while rounds run, and their model (tests/chaos)
- local_http.py   a real HTTP server with one fixed reply
- results.py      the facts a group of tests records for its make target's last line
- wire.py         record batches as a broker serves them
- needs.py        what each test needs (the stack, Airflow, Spark, ...): the markers tests/conftest.py sets
"""
