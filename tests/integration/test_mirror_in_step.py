"""The mirror's partitions followed in step with the source (kmigrate.run.mirror.stream), on the real
stack, the mirror's terms run in this process: a seeded live source (transactional producers mixing
their transactions into partitions that an idempotent producer writes too, with quiet spells in which
those partitions see its plain batches only, aborts with no record, a compacting topic, records
deleted at random offsets) written while the mirror runs; once
the producers stop and the mirror caught up, the DR cluster holds exactly what the producers were
told, at the source's offsets, every live verification was equal, and records were written in step."""
from __future__ import annotations

import os
import threading

import pytest
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.loop import VERIFIED, Mirror, MirrorSpec, follow_here

from tests.support.live_source import LiveSource, compare_with_model
from tests.support.mirror import wait_caught_up, wait_for_round

SEEDS = [int(s) for s in os.environ.get("KMIGRATE_IN_STEP_SEEDS", "41,42").split(",")]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_live_source_followed_in_step_lands_every_record_at_its_offset(stack, unique_name, tmp_path, seed):
    live = LiveSource(stack.source, unique_name, seed, quiet_spells=True)
    live.create()
    manifest = Manifest(str(tmp_path / "state"), "in-step")
    in_step: dict[str, int] = {}

    def follow(units, extras, term):  # noqa: ANN001 - the mirror's own, its rows counted a topic
        rows = follow_here((stack.source, stack.target), units, extras, term)
        for row in rows:
            in_step[row["topic"]] = in_step.get(row["topic"], 0) + row["in_step"]
        return rows

    mirror = Mirror(manifest, stack.source, stack.target,
                    MirrorSpec(live.pattern, interval_s=0.5, verify_every_s=2.0, term_s=6.0), follow, say=lambda _: None)
    stopping = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            mirror.run(stopping.is_set, max_seconds=300)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            failures.append(exc)

    driver = threading.Thread(target=run, daemon=True)
    driver.start()
    try:
        wait_for_round(manifest, 1, timeout_s=120)
        live.start()
        wait_for_round(manifest, mirror_status.read(manifest)["round"] + 20, timeout_s=120)  # ten seconds of writes
        live.stop()
        status = wait_caught_up(manifest, stack.source, live.topics, timeout_s=120)
    finally:
        live.stop_writing()
        stopping.set()
        driver.join(120)
    assert not driver.is_alive() and not failures, failures
    compared = compare_with_model(stack, live.topics, live.compacted, live.model)
    assert all(p["error"] is None for p in status["partitions"])
    totals = mirror_status.read(manifest)["totals"]
    assert 0 < totals["in_step"] <= totals["records"], totals
    assert in_step[f"{unique_name}.mixed"] > 0 and in_step[f"{unique_name}.compact"] > 0, in_step
    verified = manifest.read(VERIFIED)["rows"]
    assert verified and all(r["equal"] for r in verified), [r for r in verified if not r["equal"]]
    print(f"seed {seed}: {compared} records compared, {totals['in_step']} of {totals['records']} written in step, "
          f"{live.model.transactions} transactions, {live.model.deletes} deletes; in step by topic {in_step}")
