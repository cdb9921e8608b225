"""What a user follows while a Spark job copies or verifies many partitions
(kmigrate_spark.units.run_units): a status line every status_every_s, whether rows arrive or not, with
partitions done of the total, the rate and the time left; nothing more when the job is quick."""
from __future__ import annotations

import time

from kmigrate.model import WorkUnit
from kmigrate_spark import units


def test_the_done_line_gives_the_rate_and_the_time_left():
    assert units.done_line(0, 100, 5.0) == "0/100 partitions done after 5s"
    assert units.done_line(25, 100, 10.0) == ("25/100 partitions done after 10s (2.5 a second, about 30s left at "
                                              "that rate)")
    assert units.done_line(100, 100, 40.0) == "100/100 partitions done after 40s"


def test_status_lines_come_while_rows_arrive(monkeypatch):
    work = [WorkUnit(f"t{i // 10}", i % 10, 0) for i in range(40)]
    said: list[str] = []

    def steady(spark, todo, indexes, action, task, put, *, slots, extras):  # the one Spark job, stood in for
        for index in indexes:  # a row every 10 ms: never a pause of status_every_s
            time.sleep(0.01)
            put(index, {"ok": True})

    monkeypatch.setattr(units, "say", lambda job, message, err=False: said.append(message))
    monkeypatch.setattr(units, "_in_one_job", steady)
    rows = units.run_units(None, work, lambda u: {}, job="copy", action="copy", describe=str, slots=2, parallelism=2,
                           status_every_s=0.1, quiet=True)
    assert len(rows) == 40
    status = [line for line in said if "partitions done after" in line]
    assert status and all("a second, about" in line for line in status), said
