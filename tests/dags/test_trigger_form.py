"""The migration as a user starts it: Airflow's api-server, scheduler and dag-processor serve this
project (LocalExecutor, SQLite), headless Chromium (Debian's, driven by Playwright) opens the
kafka_migration DAG, fills its trigger form, triggers a run, and waits until the run succeeded;
screenshots of the form and of the finished grid go to test-artifacts/ui/."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from local_airflow import LocalAirflow

from tests.support.waiting import wait_until

PROJECT_DIR = Path(__file__).resolve().parents[2]
ARTIFACTS = PROJECT_DIR / "test-artifacts" / "ui"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"  # make install puts it there
PORT = 30281  # this test's own port (below the ephemeral range, 32768-60999)
SOURCE = ClusterConfig.from_bootstrap("source", "localhost:19092")
TARGET = ClusterConfig.from_bootstrap("target", "localhost:29092")
# Chromium as this machine needs it: no sandbox as root, no background calls to the internet
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def airflow_ui(tmp_path_factory, dag_spark_server):
    """Its Spark jobs run on the DAG tests' Spark Connect server (spark_connect_default, in the
    environment it inherits), as `make demo`'s do on its own."""
    server = LocalAirflow(tmp_path_factory.mktemp("airflow-ui"), PORT)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def seed(prefix: str) -> None:
    topic = f"{prefix}.orders"
    with ClusterAdmin(SOURCE) as admin:
        admin.create_topic(topic, 2, {})
    producer = Producer(SOURCE.producer())
    for p in range(2):
        for i in range(300):
            producer.produce(topic, key=b"k%d" % i, value=b"order %d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer(SOURCE.consumer(f"{prefix}.billing"))
    consumer.commit(offsets=[TopicPartition(topic, 0, 120), TopicPartition(topic, 1, 300)], asynchronous=False)
    consumer.close()


def test_trigger_form_runs_a_migration(airflow_ui, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    prefix = f"ui{uuid.uuid4().hex[:6]}"
    seed(prefix)
    state = tmp_path / "state"
    run_name = f"{prefix}-from-the-form"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait_until(lambda: _dag_known(airflow_ui), "the api-server to list kafka_migration", 180, poll_s=1)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            expect.set_options(timeout=30_000)  # expect's own default is 5 s: too short on a busy 2-core machine
            page.goto(f"{airflow_ui.url}/dags/kafka_migration")
            page.get_by_role("button", name="Trigger").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_be_visible()
            expect(dialog.get_by_text("Topics to migrate")).to_be_visible()  # the params' titles label the form
            _fill(dialog, "topics_include", rf"{prefix}\.orders")
            _fill(dialog, "groups", rf"{prefix}\..*")
            _fill(dialog, "quiesce_seconds", "1")
            _fill(dialog, "state_location", str(state))
            _fill(dialog, "run_name", run_name)
            dialog.locator('[name="element_topics_include"]').scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "trigger-form.png"))
            trigger = dialog.get_by_role("button", name="Trigger").last
            expect(trigger).to_be_enabled()  # the optional params left empty do not block the form
            trigger.click()
            expect(dialog).to_be_hidden()  # the form closes once the run is created

            run = wait_until(lambda: _finished_run(airflow_ui), "the triggered run to finish", 600, poll_s=3)
            assert run["state"] == "success", f"run {run['dag_run_id']} ended {run['state']}; logs in {airflow_ui.home}"
            assert run["conf"]["topics_include"] == rf"{prefix}\.orders"
            assert run["conf"]["run_name"] == run_name

            page.goto(f"{airflow_ui.url}/dags/kafka_migration/runs/{run['dag_run_id']}")
            expect(page.get_by_text("topic_result").first).to_be_visible()
            expect(page.get_by_text("window_step").first).to_be_visible()  # the window's cells, a step each
            page.screenshot(path=str(ARTIFACTS / "finished-grid.png"), full_page=True)
        finally:
            browser.close()

    report = state / run_name / "report.md"
    assert "Partitions verified equal: **2 of 2**" in report.read_text()
    assert (state / run_name / "copy-times.png").stat().st_size > 1000
    with ClusterAdmin(TARGET) as admin:
        assert admin.committed_offsets(f"{prefix}.billing") == {(f"{prefix}.orders", 0): 120, (f"{prefix}.orders", 1): 300}
        assert [admin.watermarks(f"{prefix}.orders", p) for p in range(2)] == [(0, 300), (0, 300)]


def _fill(dialog, param: str, value: str) -> None:
    """The form's field of one DAG param (Airflow names it element_<param>)."""
    dialog.locator(f'[name="element_{param}"]').fill(value)


def _dag_known(server: LocalAirflow) -> bool:
    try:
        return server.api("/dags/kafka_migration")["dag_id"] == "kafka_migration"
    except OSError:
        return False


def _finished_run(server: LocalAirflow):
    try:
        runs = server.api("/dags/kafka_migration/dagRuns?order_by=-start_date&limit=1")["dag_runs"]
    except OSError:  # the api-server, busy with the run on two cores, may miss one poll's 10 s
        return None
    return runs[0] if runs and runs[0]["state"] in ("success", "failed") else None
