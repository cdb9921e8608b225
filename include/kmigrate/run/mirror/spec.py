"""What a run's mirror keeps (docs/DESIGN.md §12): its selection of topics and consumer groups,
its timings and the connectors kept for an unplanned failover (`MirrorSpec`), written once in the
run manifest (`write_spec`): a restarted mirror, a failover, a failback and a drill read it back
(`read_spec`); a drill of a mirror and a planned failover move the mirror's selection instead of
their own (`selection_mirror`, `with_mirror_selection`), under the names the mirror gives them on the DR
cluster (its `renames`, a consolidation's: none, the source's). Pure Python."""
from __future__ import annotations

import dataclasses

from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest, ManifestConflict
from kmigrate.renames import PARAMS as RENAME_PARAMS, Renames
from kmigrate.run.checks import request
from kmigrate.run.checks.selection import Selection
from kmigrate.run.mirror import timings

SPEC = "mirror-spec"                       # what the run's mirror selects, written once


@dataclasses.dataclass(frozen=True)
class MirrorSpec:
    """What a mirror keeps on the DR cluster: topics (include/exclude regexes) and consumer groups
    (regex, empty: none); its status (and the groups' offsets) every `interval_s`, the selection read
    again every `refresh_s`, what the copy wrote verified every `verify_every_s`, the copy's tasks
    started again every `term_s` (their rows: where they left each partition, what they verified;
    a selection that changes, a stop and a driver started again end a term sooner). Between two
    terms nothing is copied for a second or two (a Spark job, the leases taken), so terms are long,
    and the tasks report as they go (`reports`)."""

    topics_include: str
    topics_exclude: str = ""
    groups: str = ""
    interval_s: float = request.INTERVAL_S
    refresh_s: float = request.REFRESH_S
    verify_every_s: float = timings.VERIFY_EVERY_S
    term_s: float = timings.TERM_S
    connectors: tuple[str, ...] = ()  # the source Connect cluster's, kept for an unplanned failover
    renames: Renames = Renames()  # the names of its topics and groups on the DR cluster (none: the source's)

    def check(self) -> None:
        # its topics, groups and connectors, checked as a run's selection is
        Selection(self.topics_include, self.topics_exclude, self.groups, self.connectors).check()
        # each a number in its range, the refresh no shorter than the interval (`timings`)
        timings.check_timings(self.interval_s, self.refresh_s, self.verify_every_s, self.term_s)


def write_spec(manifest: Manifest, spec: MirrorSpec) -> MirrorSpec:
    """The run's mirror spec: `spec` the first time, the same again later; another selection for the
    same run is refused (a restarted mirror keeps what it mirrors)."""
    spec.check()
    try:
        manifest.write_once(SPEC, _record(spec))
    except ManifestConflict as exc:
        raise ConfigError(f"run {manifest.run_id} mirrors {manifest.read(SPEC)} already, not {_record(spec)}; "
                          "a run's mirror keeps its selection: start a new run id for another") from exc
    return spec


def _record(spec: MirrorSpec) -> dict:
    """The spec as the manifest keeps it: its renames as their params, and only when it renames (a
    spec written before mirrors took renames reads and compares the same)."""
    record = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "renames"}
    record["connectors"] = list(spec.connectors)
    if spec.renames:
        record["renames"] = spec.renames.as_params()
    return record


def read_spec(manifest: Manifest) -> MirrorSpec:
    stored = manifest.read(SPEC)
    if stored is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no mirror spec; start the mirror with its "
                          "topic selection (kafka_dr_mirror's start task, or the job's --topics)")
    return MirrorSpec(**{**stored, "connectors": tuple(stored.get("connectors", ())),
                         "renames": Renames.from_params(stored.get("renames") or {})})


def mirror_renames(mirror: Manifest) -> Renames:
    """The names the mirror of run `mirror` gives its topics and groups on the DR cluster (a run
    without a mirror spec: none, the source's)."""
    return read_spec(mirror).renames if mirror.read(SPEC) is not None else Renames()


def shown(renames: Renames) -> str:
    """The rule as its params, each map cut to its first five entries (a message's, not a record's)."""
    parts = []
    for name, value in renames.as_params().items():
        if isinstance(value, dict):
            pairs = sorted(value.items())
            value = ", ".join(f"{s} -> {t}" for s, t in pairs[:5]) + (f" and {len(pairs) - 5} more"
                                                                      if len(pairs) > 5 else "")
            parts.append(f"{name} {value}")
        else:
            parts.append(f"{name} {value!r}")
    return "; ".join(parts)


def selection_mirror(run: request.RunRequest, *, failover: bool = False) -> str:
    """The mirror run whose topic and group selection the `run` moves in place of its own ("": its
    own): a drill's `mirror_run` (a drill of a running mirror checks what was mirrored); a planned
    failover's own run (`failover`: its run_name names the mirror, and it moves what was mirrored).
    An unplanned failover promotes what the DR cluster holds, and a migration or a drill of its own
    copy moves what it selects."""
    if run.mirror_run:
        return run.mirror_run
    return run.name if failover and not run.unplanned else ""


def with_mirror_selection(run: request.RunRequest, *, failover: bool = False) -> request.RunRequest:
    """The `run` with the topic and group selection of the mirror whose selection it moves
    (`selection_mirror`), read from that mirror's spec, and its names (the request's `mirror_selection`
    names the mirror); the `run` as it is when it moves its own."""
    mirror = selection_mirror(run, failover=failover)
    if not mirror:
        return run
    spec = read_spec(Manifest(run.state_location, mirror))
    renames = {name: spec.renames.as_params().get(name) for name in RENAME_PARAMS}
    moved = run.with_params(topics_include=spec.topics_include, topics_exclude=spec.topics_exclude or None,
                            groups=spec.groups or None, **renames)
    return dataclasses.replace(moved, mirror_selection=mirror)  # its renames held to it so (`renames_for`)
