"""Every DAG imports cleanly, quickly and without touching the network, retries its tasks and is tagged.
The DAG files are parsed only (dag_files): no Airflow database, no Spark server."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import PROJECT_DIR

DAG_IDS = {"kafka_migration", "kafka_dr_drill", "kafka_dr_failover", "kafka_dr_mirror", "kafka_migration_rollback",
           "kafka_move_consumers", "kafka_move_producers"}


def test_dags_import_without_errors(dag_files):
    assert not dag_files.import_errors, "\n".join(f"{path}: {error}" for path, error in dag_files.import_errors.items())
    assert DAG_IDS <= set(dag_files.dag_ids)


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dags_retry_and_are_tagged(dag_files, dag_id):
    dag = dag_files.dags[dag_id]
    assert dag.tags and "kafka" in dag.tags
    assert dag.default_args["retries"] >= 2
    for task in dag.tasks:
        # preflight checks input: a wrong parameter is not transient, so it fails at once; topic_result
        # and window_step show an outcome already decided, so retrying them changes nothing
        assert task.retries >= 2 or task.task_id in ("preflight", "topic_result", "window_step"), task.task_id
        assert task.execution_timeout is not None, task.task_id


def test_parsing_opens_no_connection_and_is_quick():
    """Parse the DAG files in a fresh interpreter whose sockets refuse to connect."""
    script = f"""
import socket, sys, time
def refuse(*args, **kwargs):
    raise RuntimeError("network access while parsing a DAG file")
socket.socket.connect = refuse
socket.create_connection = refuse
sys.path.insert(0, {str(PROJECT_DIR / 'plugins')!r})
started = time.monotonic()
from airflow.dag_processing.dagbag import DagBag
imported = time.monotonic()
bag = DagBag(dag_folder={str(PROJECT_DIR / 'dags')!r})
assert not bag.import_errors, bag.import_errors
print(f"{{imported - started:.2f}} {{time.monotonic() - imported:.2f}}")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    airflow_import_s, parse_s = map(float, done.stdout.split()[-2:])
    print(f"importing Airflow: {airflow_import_s:.2f}s; parsing the DAG files: {parse_s:.2f}s")
    assert parse_s < 10


@pytest.mark.parametrize("dag_id", ["kafka_migration", "kafka_dr_drill"])
def test_spark_tasks_launch_their_driver_with_kmigrates_jvm_options(dag_files, dag_id):
    """The spark-submit command each Spark task builds carries kmigrate_spark/conf.py's driver options."""
    from kmigrate_spark.conf import DRIVER_JAVA_OPTIONS

    tasks = [t for t in dag_files.dags[dag_id].tasks if type(t).__name__ == "KmigrateSparkSubmitOperator"]
    assert tasks
    for task in tasks:
        command = task._get_hook()._build_spark_submit_command(task.application)
        assert f"spark.driver.extraJavaOptions={DRIVER_JAVA_OPTIONS}" in command, (task.task_id, command)


def spark_jobs_of(dag, params: dict, run_id: str) -> dict[str, dict]:
    """What each Spark task of `dag` launches for a run of `params` as `run_id`, as it takes them from
    the run's request when it runs: its script, arguments and connections (the cutover sensor: its
    catch-up round's). The DAG's tasks are left as they are (a copy of each takes the request)."""
    import copy

    from kmigrate_airflow.frame import run_request

    request = run_request(params, run_id)
    jobs = {}
    for task in dag.tasks:
        if type(task).__name__ == "KmigrateSparkSubmitOperator":
            job = copy.copy(task)
            job.take(request)
            assert task.application_args != job.application_args  # the DAG's task untouched
        elif type(task).__name__ == "KmigrateCutoverSensor":
            job = task.catch_up_job(request)
        else:
            continue
        jobs[task.task_id] = {"script": Path(job.application).name, "args": list(job.application_args),
                              "clusters": (job.source_conn_id, job.target_conn_id),
                              "spark_connect": job.spark_connect_conn_id}
    return jobs


@pytest.mark.parametrize("dag_id", ["kafka_migration", "kafka_dr_drill"])
@pytest.mark.parametrize("run_name", [None, "", "named-run"])
def test_spark_tasks_work_on_the_run_the_other_tasks_name(dag_files, dag_id, run_name):
    """A Spark task's --run-id is the run RunFrame names for the DAG's other tasks: the run_name
    given in the conf (a param of the DAG or not), else the Airflow run id (a job reading another
    run's manifest finds no plan)."""
    from kmigrate_airflow.frame import RunFrame

    dag = dag_files.dags[dag_id]
    params = dict.fromkeys(dag.params, "") | ({} if run_name is None else {"run_name": run_name})  # the declared ones
    run_id = "manual__2026-11-27T11:45:54+00:00"
    expected = RunFrame(params, run_id).name
    jobs = spark_jobs_of(dag, params, run_id)
    assert jobs
    for task_id, job in jobs.items():
        assert job["args"][job["args"].index("--run-id") + 1] == expected, (task_id, job["args"])


def test_the_spark_tasks_launch_the_commands_their_params_say(dag_files):
    """The arguments and connections each Spark task takes from the run's request, for a run with
    every param given and for one with the form's defaults: those its templates rendered before the
    tasks read the request."""
    dags = dag_files.dags
    given = {"run_name": "named", "state_location": "/srv/state", "spark_parallelism": 4, "pre_copy_max_rounds": 3,
             "pre_copy_converged_records": 100, "source_kafka_conn_id": "src", "target_kafka_conn_id": "dst",
             "spark_connect_conn_id": "sc", "pre_copy": True, "cutover_at": "2026-12-01T22:00:00Z"}
    run_id = "manual__2026-11-27T11:45:54+00:00"
    run = ["--state-location", "/srv/state", "--run-id", "named", "--parallelism", "4"]
    remote = {"clusters": ("src", "dst"), "spark_connect": "sc"}
    assert spark_jobs_of(dags["kafka_migration"], {**defaults(dags["kafka_migration"]), **given}, run_id) == {
        "pre_copy": {"script": "pre_copy.py", "args": [*run, "--rounds", "3", "--converged-records", "100"], **remote},
        "wait_for_cutover": {"script": "catch_up.py", "args": run, **remote}}
    drill = {k: v for k, v in given.items() if k in dags["kafka_dr_drill"].params or k == "run_name"}
    assert spark_jobs_of(dags["kafka_dr_drill"], {**defaults(dags["kafka_dr_drill"]), **drill}, run_id) == {
        "copy": {"script": "drill_copy.py", "args": run, **remote},
        "verify": {"script": "verify_partitions.py", "args": run, **remote}}
    state = defaults(dags["kafka_migration"])["state_location"]
    run = ["--state-location", state, "--run-id", run_id, "--parallelism", "0"]
    local = {"clusters": ("kafka_source", "kafka_target"), "spark_connect": ""}
    assert spark_jobs_of(dags["kafka_migration"], {**defaults(dags["kafka_migration"]), "spark_connect_conn_id": None},
                         run_id) == {
        "pre_copy": {"script": "pre_copy.py", "args": [*run, "--rounds", "5", "--converged-records", "10000"],
                     **local},
        "wait_for_cutover": {"script": "catch_up.py", "args": run, **local}}
    assert spark_jobs_of(dags["kafka_dr_drill"], {**defaults(dags["kafka_dr_drill"]), "spark_connect_conn_id": None},
                         run_id) == {"copy": {"script": "drill_copy.py", "args": run, **local},
                                     "verify": {"script": "verify_partitions.py", "args": run, **local}}


def defaults(dag) -> dict:
    """The trigger form's defaults of `dag`'s params."""
    return {name: param.value for name in dag.params if (param := dag.params.get_param(name)).has_value}


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_each_dags_default_params_make_a_run_request(dag_files, dag_id):
    """The trigger form's defaults pass the run request's rules (RunRequest.from_params), which read
    them again when a task runs: the form and the request agree."""
    from kmigrate.run.checks.request import RunRequest

    dag = dag_files.dags[dag_id]
    params = {name: param.value for name in dag.params if (param := dag.params.get_param(name)).has_value}
    request = RunRequest.from_params({**params, "run_name": "defaults"}, "manual__2026-11-27T11:45:54+00:00")
    assert request.name == "defaults" and request.params["state_location"] == request.state_location
    if "quiesce_seconds" in params:
        assert request.quiesce_seconds == params["quiesce_seconds"] > 0


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_each_steps_code_is_one_import_from_its_dag_file(dag_files, dag_id):
    """A reader of a DAG file finds each task's code in a module the file imports itself (the
    steps, an operator's class), or the Spark job the file names by its script."""
    import ast

    dag = dag_files.dags[dag_id]
    source = Path(dag.fileloc).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
    for task in dag.tasks:
        function = getattr(task, "python_callable", None) or getattr(task, "partial_kwargs", {}).get("python_callable")
        if function is not None:
            assert function.__module__ in imported, (task.task_id, function.__module__)
        elif not hasattr(task, "application"):
            assert type(task).__module__ in imported, (task.task_id, type(task).__module__)
        else:
            script = Path(task.application).name
            assert f'"{script}"' in source and (PROJECT_DIR / "spark_jobs" / script).is_file(), task.task_id
