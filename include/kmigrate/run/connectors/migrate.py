"""Connector migration (docs/DESIGN.md §3): stop connectors on the source Connect cluster, re-create them on
the target one in STOPPED state with their offsets carried over, resume them there; and the
rollback that puts them back on the source.

Source connectors' offsets (positions in their external system) are PATCHed as they are; sink
connectors' offsets (`kafka_offset` per topic partition) are translated through the run's offset
maps. Everything is checked before anything is created; every call is idempotent, so each step can
be re-run."""
from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.errors import ConfigError, ConnectorNotFound, ConnectorStateError, ConnectTimeout, OffsetsNotApplied
from kmigrate.kafka.connect import ConnectClient, is_stopped
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames
from kmigrate.run.connectors.renamed import renamed_config, renamed_offsets
from kmigrate.offsets import OffsetTranslator
from kmigrate.run.connectors import old_connect
from kmigrate.run.connectors.secrets import restored
from kmigrate.run.copying.plan import translator_for_run
from kmigrate.run.records.snapshot import read_snapshot

STATES = ("RUNNING", "PAUSED", "STOPPED")


def stop_connectors(connect: ConnectClient, names: Sequence[str], manifest: Manifest | None = None,
                    wait_s: float = 60.0, quiesce_s: float | None = None) -> dict[str, str]:
    """Stop each connector and wait until its tasks are gone (`ask_to_stop` leaves the wait to the
    caller); already stopped ones stay so. Returns
    each one's state before the run stopped it (RUNNING, PAUSED or STOPPED), recorded once in the
    manifest (part connector-states) when one is given: a retry of this step, which finds them
    stopped, keeps the states the first attempt saw. The migration leaves each connector in that
    state on the target, and a rollback puts it back in that state on the source.
    A worker older than Kafka 3.5 has no STOPPED state: its connectors are paused (`old_connect`),
    which the record says (`stopped_by`), with the consumer groups of the paused sink connectors,
    whose members stay."""
    recorded = record_states(connect, names, manifest)
    if recorded.get("stopped_by") == "pause":
        old_connect.pause_connectors(connect, names, quiesce_s, wait_s)
        return dict(recorded["states"])
    for name in names:  # all asked first, then waited for: they stop at the same time
        connect.stop(name, wait=False)
    for name in names:
        connect.wait_stopped(name, wait_s)
    return dict(recorded["states"])


def ask_to_stop(connect: ConnectClient, names: Sequence[str], wait_s: float = 60.0) -> Callable[[], bool]:
    """PUT /stop for each connector, in the background (a worker answers each once it has stopped
    the connectors asked before: with a file source, 0.8 s each), and a check: True once each is
    STOPPED with no task left (`stopped_check`); a request's error is raised by the check."""
    pool = concurrent.futures.ThreadPoolExecutor(min(8, max(1, len(names))), thread_name_prefix="connector-stop")
    asked = [pool.submit(connect.stop, name, wait=False) for name in names]
    pool.shutdown(wait=False)
    check = stopped_check(connect, names, wait_s)

    def stopped() -> bool:
        for request in asked:
            if request.done() and request.exception() is not None:
                raise request.exception()
        return all(request.done() for request in asked) and check()

    return stopped


def record_states(connect: ConnectClient, names: Sequence[str], manifest: Manifest | None = None) -> dict[str, Any]:
    """Each connector's state before the run stops it, the worker's version and how it stops them
    (STOPPED; paused before Kafka 3.5, with the sink connectors' groups): recorded once in the
    manifest (part connector-states) when one is given, the first record kept."""
    def read() -> dict[str, Any]:
        recorded: dict[str, Any] = {"states": {name: connect.state(name) for name in names},
                                    "worker": connect.worker_version,
                                    "stopped_by": "stop" if connect.has_offsets_api else "pause"}
        if not connect.has_offsets_api:
            infos = {name: connect.info(name) for name in names}
            recorded["paused_groups"] = sorted(old_connect.sink_group(n, i["config"]) for n, i in infos.items()
                                               if i["type"] == "sink")
        return recorded
    return manifest.get_or_create(Part.CONNECTOR_STATES, read) if manifest is not None else read()


def stopped_check(connect: ConnectClient, names: Sequence[str], wait_s: float = 60.0) -> Callable[[], bool]:
    """For connectors asked to stop (`stop_connectors` without `wait`): a check, True once each is
    STOPPED with no task left (a connector once seen so is not asked again); ConnectTimeout naming
    the first one still stopping `wait_s` seconds after the check was made."""
    left = list(names)
    deadline = time.monotonic() + wait_s

    def stopped() -> bool:
        while left:
            status = connect.status(left[0])
            if not is_stopped(status):
                if time.monotonic() > deadline:
                    raise ConnectTimeout(f"connector {left[0]!r} on {connect.url} was not STOPPED with no tasks after "
                                         f"{wait_s:.0f}s (last status: {status}); check the worker log",
                                         connector=left[0])
                return False
            left.pop(0)
        return True

    return stopped


def states_before(manifest: Manifest) -> dict[str, str]:
    """Each connector's state on the source before the run stopped it (see stop_connectors)."""
    recorded = manifest.read(Part.CONNECTOR_STATES)
    if recorded is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no connector states: the run did not stop "
                          "any connector (check the run name)")
    return recorded["states"]


def rollback_states(states: Mapping[str, str], names: Sequence[str] | None, run: str) -> dict[str, str]:
    """The states a rollback puts back on the source: those of `names` (empty: every connector the
    run stopped) among `states` (`states_before` of run `run`). ConfigError naming the connectors
    that run did not stop, before anything is changed."""
    names = list(names or sorted(states))
    unknown = sorted(set(names) - set(states))
    if unknown:
        raise ConfigError(f"connectors {', '.join(unknown)} were not stopped by migration run {run!r}; name only "
                          "connectors of that run (nothing was changed)")
    return {n: states[n] for n in names}


def restore_states(connect: ConnectClient, states: Mapping[str, str], wait_s: float = 60.0) -> list[dict[str, Any]]:
    """Bring each connector into the state given for it: RUNNING (resumed, all tasks running),
    PAUSED or STOPPED. Idempotent."""
    out = []
    for name, state in sorted(states.items()):
        if state == "RUNNING":
            connect.resume(name)
            status = connect.wait_for(
                name, lambda st: st["connector"]["state"] == "RUNNING" and st["tasks"]
                and all(t["state"] == "RUNNING" for t in st["tasks"]), "RUNNING with all tasks running", wait_s)
        elif state == "PAUSED":
            connect.pause(name)
            status = connect.wait_for(name, lambda st: st["connector"]["state"] == "PAUSED"
                                      and all(t["state"] == "PAUSED" for t in st["tasks"]), "PAUSED", wait_s)
        elif state == "STOPPED":
            connect.stop(name, wait_s=wait_s)
            status = connect.status(name)
        else:
            raise ConnectorStateError(
                f"connector {name!r} was {state} on the source before the run, which is none of {', '.join(STATES)}; "
                f"its state on {connect.url} is left as it is (check the connector and set its state by hand)",
                connector=name)
        out.append({"name": name, "state": status["connector"]["state"], "wanted": state, "tasks": len(status["tasks"])})
    return out


def _config_value(value: Any) -> str:
    """A Connect config value as the REST API keeps it: a string (JSON true/false as true/false)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_overrides(overrides: Any, connectors: Sequence[str] | None, *, among: str = "the selected connectors",
                    fix: str = "add it to connectors, fix the name, or drop its overrides") -> None:
    """The `connector_overrides` param: an object {connector: {key: value}} whose connectors are
    among the selected `connectors` and whose values are strings, numbers or booleans (a Connect
    config is flat). ConfigError naming the connector and key, never a value (often a password).
    `among` names where the connectors come from, `fix` what to do about one that is not there (a
    drill takes its mirror's: `kmigrate.run.mirror.drill.overridable`)."""
    if not overrides:
        return
    if connectors is not None and (isinstance(connectors, (str, bytes)) or not isinstance(connectors, Sequence)
                                   or not all(isinstance(c, str) for c in connectors)):
        raise ConfigError(f"connectors is {type(connectors).__name__} {connectors!r}, not a list of connector names; "
                          'give ["name", ...] (empty: none)')
    selected = list(connectors or ())
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"connector_overrides is a {type(overrides).__name__}, not an object; give "
                          '{"connector": {"key": "value"}}, or leave it empty')
    for name, config in overrides.items():
        if name not in selected:
            raise ConfigError(f"connector_overrides names connector {name!r}, which is not among {among} "
                              f"({', '.join(map(repr, selected)) or 'none'}): its overrides would be ignored; {fix}")
        if not isinstance(config, Mapping):
            raise ConfigError(f"connector_overrides[{name!r}] is a {type(config).__name__}, not an object of config "
                              f'keys; give {{"{name}": {{"key": "value"}}}}')
        for key, value in config.items():
            if not isinstance(key, str) or not key.strip():
                raise ConfigError(f"connector_overrides[{name!r}] has an empty config key; name the key to override")
            if isinstance(value, (Mapping, list, tuple)):
                raise ConfigError(f"connector_overrides[{name!r}][{key!r}] is a nested "
                                  f"{'object' if isinstance(value, Mapping) else 'list'}, but a Connect config "
                                  "is flat (key: string); give its value as one string (a list as comma-separated "
                                  "text, nested keys as their own dotted keys)")
            if value is None or not isinstance(value, (str, int, float)):
                kind = "null" if value is None else f"a {type(value).__name__}"
                raise ConfigError(f"connector_overrides[{name!r}][{key!r}] is {kind}, not a string, number or "
                                  "boolean; give the value (an override cannot remove a key)")
            if key == "name" and value != name:
                raise ConfigError(f"connector_overrides[{name!r}]['name'] renames the connector, which a migration "
                                  "does not do; drop that override (the connector keeps its name on the target)")


def target_config(config: Mapping[str, str], *, target_bootstrap: str | None = None,
                  overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The connector's config for the target Connect cluster: client overrides that name a
    bootstrap address (`producer.override.bootstrap.servers`, ...) point at the target cluster,
    then `overrides` (for example another input or output file; checked by `check_overrides`)
    apply, numbers and booleans as Connect's strings."""
    out = dict(config)
    if target_bootstrap:
        for key in out:
            if key.endswith("bootstrap.servers"):
                out[key] = target_bootstrap
    out.update({key: _config_value(value) for key, value in (overrides or {}).items()})
    return out


def renamed_target_config(name: str, kind: str, config: Mapping[str, str], names: Mapping[str, str], *,
                          keys: Sequence[str] = (), target_bootstrap: str | None = None,
                          overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Connector `name`'s config (of `kind`) for the target Connect cluster under a run's renames: the
    topics it names under their target names (`renamed.renamed_config`, `keys` its connector_topic_keys;
    the keys `overrides` sets left to them), then `target_config`."""
    own = overrides or {}
    return target_config(renamed_config(name, kind, config, names, overridden=own, keys=keys),
                         target_bootstrap=target_bootstrap, overrides=own)


def _canonical(offsets: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(json.dumps(entry, sort_keys=True) for entry in offsets)


def translated_offsets(entry: Mapping[str, Any], translator: OffsetTranslator) -> list[dict[str, Any]]:
    if entry["type"] != "sink":
        return [dict(o) for o in entry["offsets"]]
    out = []
    for o in entry["offsets"]:
        topic, partition = o["partition"]["kafka_topic"], int(o["partition"]["kafka_partition"])
        offset = translator.target_offset(topic, partition, int(o["offset"]["kafka_offset"]))
        out.append({"partition": {"kafka_topic": topic, "kafka_partition": partition},
                    "offset": {"kafka_offset": offset}})
    return out


def _read_back(connect: ConnectClient, name: str, offsets: Sequence[Mapping[str, Any]], timeout_s: float = 30.0) -> None:
    """GET the offsets until they equal what was PATCHed: the worker's offset store can answer
    from before the write for a moment."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = connect.offsets(name)
        if _canonical(got) == _canonical(offsets):
            return
        if time.monotonic() > deadline:
            raise OffsetsNotApplied(f"connector {name!r} on {connect.url}: offsets read back {got} still differ from "
                                    f"those written {list(offsets)} after {timeout_s:.0f}s; re-run this step")
        time.sleep(0.2)


def exists_alike(connect: ConnectClient, name: str, config: Mapping[str, str]) -> bool:
    """Whether connector `name` exists on `connect` already, with `config` (an earlier attempt made
    it); ConnectorStateError when it exists with another config (nothing is created then)."""
    try:
        existing = connect.config(name)
    except ConnectorNotFound:
        return False
    if {k: v for k, v in existing.items() if k != "name"} != {k: v for k, v in config.items() if k != "name"}:
        raise ConnectorStateError(
            f"connector {name!r} already exists on the target Connect cluster ({connect.url}) with "
            "another config; delete it there or rename it (nothing was created)", connector=name)
    return True


def place_stopped(connect: ConnectClient, name: str, kind: str, config: Mapping[str, str],
                  offsets: Sequence[Mapping[str, Any]], exists: bool) -> dict[str, Any]:
    """Connector `name` created STOPPED on `connect` (unless it `exists`) and its `offsets` written
    and read back; one that no longer is STOPPED (an earlier attempt resumed it) is left alone."""
    if not exists:
        connect.create(name, config, initial_state="STOPPED")
    state = connect.state(name)
    if state != "STOPPED":
        return {"name": name, "type": kind, "created": False, "offsets_written": False, "state": state}
    if offsets:
        connect.alter_offsets(name, list(offsets))
        _read_back(connect, name, offsets)
    return {"name": name, "type": kind, "created": not exists, "offsets_written": bool(offsets),
            "offsets": list(offsets), "state": state}


def migrate_connectors(manifest: Manifest, target_connect: ConnectClient, *, target_bootstrap: str | None = None,
                       overrides: Mapping[str, Mapping[str, str]] | None = None,
                       source_connect: ConnectClient | None = None, renames: Renames = Renames()
                       ) -> list[dict[str, Any]]:
    """Create each snapshot connector on the target Connect cluster in STOPPED state with its
    config and (translated) offsets, and read the offsets back. Resuming is `resume_connectors`.
    A connector that already runs on the target (an earlier attempt resumed it) is left alone.
    Secrets the snapshot left out are read again from `source_connect` (`connector_secrets`).
    Under the run's `renames`, the topics a connector names, and a sink's offsets, take the
    target's names (`renamed`)."""
    snapshot = read_snapshot(manifest)
    translator = translator_for_run(manifest)
    names = renames.topic_names(snapshot["topics"])
    prepared = []
    for name, entry in sorted(snapshot["connectors"].items()):
        if entry["state"] != ("PAUSED" if entry.get("stopped_by") == "pause" else "STOPPED"):
            raise ConnectorStateError(
                f"connector {name!r} was {entry['state']} on the source when the snapshot was taken, so its "
                "offsets may be behind; stop it first and take the snapshot in a new run (nothing was created)",
                connector=name)
        config = renamed_target_config(name, entry["type"], restored(entry, name, source_connect), names,
                                       keys=renames.connector_keys.get(name, ()), target_bootstrap=target_bootstrap,
                                       overrides=(overrides or {}).get(name))
        offsets = translated_offsets(entry, translator)
        if entry["type"] == "sink":
            offsets = renamed_offsets(offsets, names)
        prepared.append((name, entry["type"], config, offsets, exists_alike(target_connect, name, config)))
    results = [place_stopped(target_connect, *one) for one in prepared]
    source_states = manifest.read(Part.CONNECTOR_STATES) or {"states": {}}
    for result in results:
        result["source_state"] = source_states["states"].get(result["name"])
    manifest.write_once(Part.attempt(Part.CONNECTOR_RESULTS), {"connectors": results})
    return results


def resume_connectors(connect: ConnectClient, names: Sequence[str], wait_s: float = 60.0) -> list[dict[str, Any]]:
    """Resume each connector and wait until it and all its tasks run."""
    return restore_states(connect, dict.fromkeys(names, "RUNNING"), wait_s)


def stop_target_copies(target_connect: ConnectClient, names: Sequence[str], wait_s: float = 60.0) -> list[str]:
    """Stop each connector on the target where it exists; returns those stopped."""
    stopped = []
    for name in names:
        try:
            target_connect.stop(name, wait_s=wait_s)
            stopped.append(name)
        except ConnectorNotFound:
            pass
    return stopped


def rollback_connectors(source_connect: ConnectClient, target_connect: ConnectClient, states: Mapping[str, str],
                        wait_s: float = 60.0) -> list[dict[str, Any]]:
    """Stop the target copies (where they exist), then put the connectors on the source back in
    the states they had before the run (`states_before`)."""
    stop_target_copies(target_connect, list(states), wait_s)
    return restore_states(source_connect, states, wait_s)
