"""Runs' claims on their topics (docs/DESIGN.md §4.7): a run claims its topics before its first
write (`claim_topics`), a dry run checks them free (`check_topics_free`), and the run's report or an
operator by hand releases them (`release_topics`); a refusal names the holding run and the way out.
The claims are records of the claims log (`kmigrate.claims.log`)."""
from __future__ import annotations

import logging
import shlex
import socket
import time
from collections.abc import Collection
from typing import Any

from kmigrate.claims.log import claim_log
from kmigrate.claims.records import problem
from kmigrate.claims.state import Claims
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, TopicsHeld

log = logging.getLogger(__name__)


def _holder(claims: Claims, key: str) -> str:
    claim = claims.runs[key]
    return (f"run {claim['run']!r}" + (f" of DAG {claim['dag']!r}" if claim.get("dag") else "")
            + (f" (deployment {claim['deployment']!r})" if claim.get("deployment") else "")
            + f" (claimed {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claim['ts'] / 1000))}"
            + f" on {claim.get('host')})")


def _held_error(run: str, conflicts: dict[str, list[str]], claims: Claims, deployment: str = "") -> TopicsHeld:
    me = f"run {run!r}" + (f" (deployment {deployment!r})" if deployment else "")
    if not conflicts:  # refused, and its holder released them since
        return TopicsHeld(f"{me} is refused before writing anything: another run held some of its topics when it "
                          "claimed them and has released them since; retry", holders=[])
    holders = "; ".join(f"{_holder(claims, key)} holds {', '.join(topics)}" for key, topics in sorted(conflicts.items()))
    first = claims.runs[sorted(conflicts)[0]]
    # a claim of a deployment is released by hand only with --force (the CLI's own deployment is none)
    forced = f" --force --deployment {shlex.quote(first['deployment'])}" if first.get("deployment") else ""
    return TopicsHeld(f"{me} is refused before writing anything: {holders}. Let that run finish (its report "
                      "releases its topics) or, if it was abandoned, release them with `python -m kmigrate.claims "
                      f"release {shlex.quote(first['run'])}{forced} --bootstrap-servers <target> --config-file "
                      "<client settings, for a secured target>`, then retry",
                      holders=sorted({claims.runs[key]["run"] for key in conflicts}))


def check_topics_free(target: ClusterConfig, run: str, topics: Collection[str], *, deployment: str = "") -> None:
    """Read only (a dry run, the preflight): TopicsHeld when another run (another name, or the same
    name of another `deployment`) holds one of `topics`."""
    claims = claim_log(target).current()
    conflicts = claims.conflicts(run, topics, deployment)
    if conflicts:
        raise _held_error(run, conflicts, claims, deployment)


def claim_topics(target: ClusterConfig, run: str, topics: Collection[str], dag: str | None = None, *,
                 deployment: str = "", source_id: str | None = None) -> None:
    """The run's claim on `topics` (again: no change); TopicsHeld, naming the holders, when another
    run holds one of them. `deployment` tells this run from runs of the same name elsewhere (the state
    location of its manifest); `source_id`, the id of the cluster the run
    copies from, is recorded in the log's sources (`received_from`)."""
    record = {"kind": "run", "run": run, "deployment": deployment, "topics": sorted(topics), "dag": dag,
              "host": socket.gethostname(), **({"source_id": source_id} if source_id is not None else {})}
    why = problem(record)
    if why:  # every reader would skip it: refused here, where the caller can be told
        raise ConfigError(f"the claim of run {run!r} on {target.name} cannot be written: {why}; pass the run's name, "
                          "its deployment and the source cluster's id as strings and its topics as names")
    claims_log = claim_log(target)
    if not claims_log.submit(record):
        raise _held_error(run, claims_log.state.conflicts(run, topics, deployment), claims_log.state, deployment)
    log.info("%s: run %s holds %d topics", target.name, run, len(topics))


def release_topics(target: ClusterConfig, run: str, *, deployment: str | None = "", force: bool = False) -> bool:
    """Release the run's topics (the run of `deployment`: the empty one is that of claims written
    before deployments); False when it held none. With `force` (by hand: the CLI's --force), the
    claim of `deployment` whoever asks, or with `deployment=None` the run's claims of every deployment."""
    if deployment is None and not force:
        raise ConfigError(f"releasing run {run!r} of every deployment needs force; or name its deployment")
    record: dict[str, Any] = {"kind": "run-release", "run": run, **({"force": True} if force else {}),
                              **({"deployment": deployment} if deployment is not None else {})}
    return claim_log(target).submit(record)
