"""The tests' kill hook, outside the shipped code: a Python started with this folder on PYTHONPATH
(and KMIGRATE_TEST_KILL_AFTER="N:DIR" set) kills itself with SIGKILL the first time a copy has
handed N records of a partition to the target (once per partition: DIR keeps a marker file each).
Spark's Python workers get it from the environment of spark-submit, or of the Spark Connect
server: PySpark puts the JVM's PYTHONPATH on its workers' (tests/support/kill_hook.py sets both).

It wraps kmigrate.run.copying.tasks and kmigrate.run.mirror.task (the mirror's long-running
tasks) once each is imported: `copy_partition` gets a progress hook
that kills (and whole batches are fetched 16 KiB at a time unless a fetch size is given, so that the
hook sees progress before the end), and `copy_together` copies nothing (every partition takes the
record-by-record copier, which reports progress)."""
from __future__ import annotations

import dataclasses
import importlib.abc
import logging
import os
import signal
import sys

ENV = "KMIGRATE_TEST_KILL_AFTER"
MODULES = ("kmigrate.run.copying.tasks", "kmigrate.run.mirror.task")
SMALL_FETCH = 16 << 10


def _patch(tasks) -> None:  # noqa: ANN001 - one of MODULES
    after, marker_dir = os.environ[ENV].split(":", 1)
    copy_partition = tasks.copy_partition
    log = logging.getLogger(tasks.__name__)

    def killing_copy_partition(source, target, unit, options, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        marker = os.path.join(marker_dir, f"{unit.topic}-{unit.partition}")
        progress = options.progress_hook

        def maybe_kill(records: int) -> None:
            if progress is not None:
                progress(records)
            if records < int(after):
                return
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            log.info("%s[%d]: test hook %s: SIGKILL after %d records", unit.topic, unit.partition, ENV, records)
            os.kill(os.getpid(), signal.SIGKILL)

        changes = {"progress_hook": maybe_kill}
        if options.fetch_max_bytes == type(options)().fetch_max_bytes:  # none given
            changes["fetch_max_bytes"] = SMALL_FETCH
        return copy_partition(source, target, unit, dataclasses.replace(options, **changes), *args, **kwargs)

    tasks.copy_partition = killing_copy_partition
    if hasattr(tasks, "copy_together"):
        tasks.copy_together = lambda *args, **kwargs: {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches each of MODULES right after it is executed, in whichever process imports it."""

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name not in MODULES:
            return None
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if finder is not self and hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        execute = spec.loader.exec_module

        def execute_then_patch(module) -> None:  # noqa: ANN001
            execute(module)
            _patch(module)

        spec.loader.exec_module = execute_then_patch
        return spec


def _chain() -> None:
    """Run the sitecustomize this one shadows (the system's), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != here])
    if spec is not None and spec.loader is not None:
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except Exception:  # noqa: BLE001 - as Python's own site does: a failing sitecustomize is not fatal
            pass


if os.environ.get(ENV):
    sys.meta_path.insert(0, _AfterImport())
_chain()
