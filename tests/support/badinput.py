"""How a bad-input test states its case (`make test-bad-input`): the input must end in a clear error, a
KmigrateError (or the Airflow failure or form refusal carrying one's text) whose message names what
the case says, before anything is written or stopped. Each case appends one row to the file named by
KMIGRATE_BAD_INPUT_RESULTS (tests/badinput/summary.py makes the last line of it). The cases run
the DAGs with tests/support/airflow.py's run_dag."""
from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterable

from kmigrate.errors import KmigrateError

from tests.support import results

RESULTS_ENV = "KMIGRATE_BAD_INPUT_RESULTS"

# the exceptions that carry a clear error out of the library: its own, Airflow's failure raised from one,
# and the trigger form's refusal of a param (its message names the param)
CLEAR = (KmigrateError,)
CLEAR_NAMES = {"AirflowFailException", "ParamValidationError"}

# a line of a log that shows an exception's class and message: "package.module.Name: message"
_RAISED = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Conflict|Open|"
                     r"Found|Unreachable|Timeout|Unavailable|Held|Diverged|Moved|Mismatch|Target|Acls))(?::|$)",
                     re.MULTILINE)


def _is_clear(exc: BaseException) -> bool:
    return isinstance(exc, CLEAR) or type(exc).__name__ in CLEAR_NAMES


def refused(kind: str, action: Callable[[], object], *words: str,
            written: Callable[[], Iterable[str]] = lambda: (), destructive: bool = False) -> BaseException:
    """Run `action`: it must raise a clear error whose text contains each of `words` (case-insensitive),
    and `written()` (what was written or stopped, checked after) must list nothing. Records the row
    (`destructive`: the step refused would delete, stop, promote or write on a cluster) and asserts;
    returns the exception."""
    exc: BaseException | None = None
    try:
        action()
    except BaseException as caught:  # noqa: BLE001 - a traceback of any kind is what this counts
        exc = caught
    text = "" if exc is None else str(exc)
    clear = exc is not None and _is_clear(exc) and all(w.lower() in text.lower() for w in words)
    tb = exc is not None and not _is_clear(exc)
    left = sorted(written())
    results.record(RESULTS_ENV, kind=kind, clear=clear, traceback=tb, written=len(left), via="library",
                   destructive=destructive, error=(type(exc).__name__ + ": " + text)[:300] if exc else None)
    assert exc is not None, f"{kind}: accepted, no error"
    assert not tb, f"{kind}: not a clear error:\n" + "".join(traceback.format_exception(exc))
    assert clear, f"{kind}: the error does not say {words}: {text}"
    assert not left, f"{kind}: written or stopped before the refusal: {left}"
    return exc


def unclear_exceptions(log: str) -> list[str]:
    """Exception class names in a task log that are not clear errors (a KmigrateError's own name, or
    Airflow's failure raised from one, are clear)."""
    import kmigrate.errors as errors
    from kmigrate.manifest import ManifestConflict, ManifestError

    ours = {name for name, value in vars(errors).items() if isinstance(value, type)} | {
        ManifestError.__name__, ManifestConflict.__name__} | CLEAR_NAMES
    return sorted({m.group(1) for m in _RAISED.finditer(log)} - ours)


def refused_by_dag(kind: str, run, log: str, *words: str, failed_task: str = "preflight",
                   written: Callable[[], Iterable[str]] = lambda: (), destructive: bool = False) -> None:
    """A DAG run (`dag.test()`) given a bad param: `failed_task` failed with a clear error whose text
    (in `log`, the captured output) contains each of `words`; no other task ran; nothing written."""
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    others_ran = sorted(t for t, s in states.items() if t != failed_task and s not in ("None", "upstream_failed",
                                                                                      "skipped"))
    unclear = unclear_exceptions(log)
    clear = states.get(failed_task) == "failed" and all(w.lower() in log.lower() for w in words)
    left = sorted(written())
    results.record(RESULTS_ENV, kind=kind, clear=clear and not others_ran, traceback=bool(unclear),
                   written=len(left) + len(others_ran), via="dag", destructive=destructive, error=None)
    assert not unclear, f"{kind}: the log shows {unclear}"
    assert clear, f"{kind}: {failed_task} {states.get(failed_task)}; the log does not say {words}"
    assert not others_ran, f"{kind}: tasks ran after the refusal: {others_ran}"
    assert not left, f"{kind}: written or stopped before the refusal: {left}"


def nothing_at(path) -> Callable[[], list[str]]:
    """`written` for a case whose state location is `path`: whatever exists under it."""
    from pathlib import Path

    def left() -> list[str]:
        root = Path(path)
        return [str(p) for p in root.rglob("*")] + ([str(root)] if root.exists() else [])
    return left


def survived(kind: str, action: Callable[[], object]) -> None:
    """A bad record that must be read past, not refused (the claims log's untrusted records): `action`
    (what must still work after it) must not raise. Records the row (a clear outcome, or a traceback)."""
    try:
        action()
    except BaseException as exc:
        results.record(RESULTS_ENV, kind=kind, clear=False, traceback=True, written=0, via="library",
                       error=(type(exc).__name__ + ": " + str(exc))[:300])
        raise
    results.record(RESULTS_ENV, kind=kind, clear=True, traceback=False, written=0, via="library", error=None)
