"""The ACLs that let the applications use the migrated topics (docs/DESIGN.md §7): the source's
bindings that apply to the selected topics and groups (literal names, `*`, and prefixes that match
one of them), and with the scope `principals` also the transactional-id and cluster bindings of the
principals that hold those; compared with the target's (to add, present, conflicting: the target
denies what the source allows, or allows what it denies), the missing ones created on the target
before the connectors resume, and the principals named whose SCRAM credentials the source has and
the target lacks (credentials cannot be read, so they cannot be copied).

Reading ACLs needs Describe on the source cluster, which a read-only principal may hold; creating
them needs Alter on the target cluster. A cluster without an authorizer has no ACLs: nothing is
read from a source without one, and a target without one, given ACLs to copy, is refused (they
would not apply there). The bindings of the run's own principals (its clients' SASL users) are left out."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, MissingAcls
from kmigrate.kafka import quota_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import Renames, one_prefix
from kmigrate.run.checks.rights import cluster_operations, operation_names
from kmigrate.run.checks.selection import SCOPES
from kmigrate.run.records.snapshot import read_snapshot

PART = "acls"  # attempts: the ACLs planned and created on the target, and the principals missing there
_BY_APPLICATIONS = ("TRANSACTIONAL_ID", "CLUSTER")  # what a principal's applications need beside topics and groups
_NO_AUTHORIZER = (KafkaError.SECURITY_DISABLED,)


@dataclasses.dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, by names (CLUSTER for confluent-kafka's BROKER resource type)."""

    resource: str      # TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER
    name: str
    pattern: str       # LITERAL, PREFIXED
    principal: str     # User:alice, User:*
    host: str
    operation: str     # READ, WRITE, DESCRIBE, ...
    permission: str    # ALLOW, DENY

    @classmethod
    def of(cls, binding: AclBinding) -> Acl:
        resource = "CLUSTER" if binding.restype == ResourceType.BROKER else binding.restype.name
        return cls(resource, binding.name, binding.resource_pattern_type.name, binding.principal, binding.host,
                   binding.operation.name, binding.permission_type.name)

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> Acl:
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})

    def binding(self) -> AclBinding:
        kind = ResourceType.BROKER if self.resource == "CLUSTER" else ResourceType[self.resource]
        return AclBinding(kind, self.name, ResourcePatternType[self.pattern], self.principal, self.host,
                          AclOperation[self.operation], AclPermissionType[self.permission])

    def row(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        pattern = "prefixed " if self.pattern == "PREFIXED" else ""
        return (f"{self.principal} {self.permission} {self.operation} on {self.resource} {pattern}{self.name!r}"
                f"{'' if self.host == '*' else f' from {self.host}'}")

    def opposite(self) -> Acl:
        return dataclasses.replace(self, permission="DENY" if self.permission == "ALLOW" else "ALLOW")


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ConfigError(f"acls must be one of {', '.join(SCOPES)}, not {scope!r}: off copies no ACL, resources the "
                          "bindings of the selected topics and groups, principals also the transactional-id and cluster "
                          "bindings of the principals that hold those")
    return scope


def applies(acl: Acl, topics: Collection[str], groups: Collection[str]) -> bool:
    """Whether a topic or group binding matches one of `topics` or `groups`."""
    names = {"TOPIC": topics, "GROUP": groups}.get(acl.resource)
    if not names:
        return False
    if acl.pattern == "LITERAL":
        return acl.name == "*" or acl.name in names
    return acl.pattern == "PREFIXED" and any(n.startswith(acl.name) for n in names)


def selected(acls: Iterable[Acl], topics: Collection[str], groups: Collection[str], scope: str,
             own: Collection[str] = ()) -> list[Acl]:
    """The bindings of `acls` the scope takes, sorted, without those of the principals in `own`."""
    acls = [a for a in acls if a.principal not in own]
    if scope == "off":
        return []
    taken = {a for a in acls if applies(a, topics, groups)}
    if scope == "principals":
        holders = {a.principal for a in taken}
        taken |= {a for a in acls if a.resource in _BY_APPLICATIONS and a.principal in holders}
    return sorted(taken)


def renamed(acls: Iterable[Acl], topics: Collection[str], groups: Collection[str],
            names: Mapping[str, str] | None, group_names: Mapping[str, str] | None) -> list[Acl]:
    """`acls` as the target needs them under the run's renames ({source: target} of the selected
    `topics` and `groups`): a literal binding of a renamed topic or group names its new name; a
    prefixed one gets the prefix that renames every selected topic (group) it matches, prepended
    (`orders.` becomes `a.orders.`), and is left as it is where none of them is renamed. A prefixed
    binding whose matches a rename splits (some renamed otherwise, or not at all) has no honest
    translation: ConfigError naming each such binding and the way out. Other bindings stay."""
    out, split = [], []
    for acl in acls:
        table = {"TOPIC": (topics, names or {}), "GROUP": (groups, group_names or {})}.get(acl.resource)
        if table is None or (acl.name == "*" and acl.pattern == "LITERAL"):
            out.append(acl)
            continue
        selected_names, rename = table
        if acl.pattern == "LITERAL":
            out.append(dataclasses.replace(acl, name=rename.get(acl.name, acl.name)))
            continue
        prefix = one_prefix(rename, [n for n in selected_names if n.startswith(acl.name)])
        if prefix is not None:
            out.append(dataclasses.replace(acl, name=prefix + acl.name))
        else:
            split.append(acl.text())
    if split:
        raise ConfigError("ACLs whose prefixed pattern the run's renames split (the topics or groups it matches are not "
                          "all renamed by one prefix, so no prefixed pattern on the target covers just them): "
                          + "; ".join(sorted(set(split))) + ". Rename those topics or groups alike, or run with "
                          "acls=off and grant the ACLs on the target yourself; nothing was written")
    return sorted(set(out))


def compare(expected: Iterable[Acl], on_target: Iterable[Acl]) -> dict[str, list[Acl]]:
    """{to_add, present, conflicting}: `conflicting` are the target's bindings that deny what an
    expected one allows (or allow what it denies) for the same principal, resource and operation."""
    have = set(on_target)
    expected = sorted(set(expected))
    return {"to_add": [a for a in expected if a not in have], "present": [a for a in expected if a in have],
            "conflicting": sorted({a.opposite() for a in expected if a.opposite() in have})}


def read_acls(admin: ClusterAdmin, side: str) -> list[Acl] | None:
    """Every binding on the cluster; None when it has no authorizer."""
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    try:
        return [Acl.of(b) for b in admin.client.describe_acls(everything, request_timeout=30).result(timeout=60)]
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() in _NO_AUTHORIZER:
            return None
        if error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise ConfigError(f"reading the {side} cluster's ACLs was refused: the run's principal needs Describe on "
                              f"the {side} cluster (a read-only right) to copy the applications' ACLs; grant it, or run "
                              "with acls=off and write the target's ACLs yourself") from exc
        raise ConfigError(f"reading the {side} cluster's ACLs failed: {error.str()}; run with acls=off to leave "
                          "them out") from exc


def missing_principals(source: ClusterAdmin, target: ClusterAdmin, acls: Iterable[Acl]) -> list[dict[str, Any]]:
    """The users of `acls` whose SCRAM credentials the source has and the target lacks, each with
    what to do; [] where either cluster does not say (no SCRAM there, or no right to describe it)."""
    users = sorted(_users(acls))
    if not users:
        return []
    on_source, on_target = _scram_users(source, users), _scram_users(target, users)
    if on_source is None or on_target is None:
        return []
    return [{"principal": f"User:{user}", "mechanisms": on_source[user],
             "do": f"create its SCRAM credentials on the target before its applications switch (kafka-configs.sh "
                   f"--bootstrap-server <target> --alter --entity-type users --entity-name {user} --add-config "
                   f"'{on_source[user][0]}=[password=...]'): a password cannot be read from the source; its ACLs "
                   "are on the target already"}
            for user in users if on_source.get(user) and not on_target.get(user)]


def _scram_users(admin: ClusterAdmin, users: list[str]) -> dict[str, list[str]] | None:
    """{user: its SCRAM mechanisms} ([] for a user with none); None when the cluster does not say."""
    try:
        futures = admin.client.describe_user_scram_credentials(users, request_timeout=30)
    except (KafkaException, ValueError):
        return None
    found: dict[str, list[str]] = {}
    for user, future in futures.items():
        try:
            found[user] = sorted(i.mechanism.name.replace("_", "-") for i in future.result(timeout=60).scram_credential_infos)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.RESOURCE_NOT_FOUND:
                return None
            found[user] = []
    return found


def _may(allowed: set[str] | None, operation: str) -> bool:
    return allowed is None or bool(allowed & {operation, "ALL"})


def _users(acls: Iterable[Acl]) -> set[str]:
    """The user names of `acls`' principals (not the wildcard User:*)."""
    return {a.principal[5:] for a in acls if a.principal.startswith("User:") and a.principal != "User:*"}


def _quotas(source: ClusterConfig, target: ClusterConfig, acls: Iterable[Acl]) -> tuple[list[dict], list[dict]]:
    """The client quotas of the users holding `acls` on the source (theirs, and theirs with a client
    id), and those of them the target lacks or holds with other values: [{entity, values}] each."""
    users = _users(acls)
    if not users:
        return [], []

    def theirs(cluster: ClusterConfig) -> dict:
        return {e: v for e, v in quota_wire.describe(cluster).items() if dict(e).get("user") in users}

    on_source, on_target = theirs(source), theirs(target)
    rows = [{"entity": [list(c) for c in e], "values": v} for e, v in sorted(on_source.items())]
    return rows, [r for r, (e, v) in zip(rows, sorted(on_source.items()))
                  if any(on_target.get(e, {}).get(k) != x for k, x in v.items())]


def own_principals(*clusters: ClusterConfig) -> set[str]:
    """The run's own principals: the SASL users of its clients."""
    return {f"User:{c.settings['sasl.username']}" for c in clusters if c.settings.get("sasl.username")}


def plan(source: ClusterConfig, target: ClusterConfig, topics: Collection[str], groups: Collection[str],
         scope: str, names: Mapping[str, str] | None = None, group_names: Mapping[str, str] | None = None
         ) -> dict[str, Any]:
    """What the run would do with ACLs, read-only: the expected bindings (under the run's renames,
    `names` and `group_names`: `renamed`), the comparison with the target's, the principals missing
    there, and whether each side has an authorizer."""
    if check_scope(scope) == "off":
        return {"scope": scope}
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        on_source = read_acls(source_admin, "source")
        if on_source is None:
            return {"scope": scope, "source_authorizer": False, "expected": []}
        expected = renamed(selected(on_source, topics, groups, scope, own_principals(source, target)), topics, groups,
                           names, group_names)
        on_target = read_acls(target_admin, "target") if expected else []
        if on_target is None:
            raise ConfigError(f"the target cluster has no authorizer, so the {len(expected)} ACLs the applications "
                              "hold on the source for the selected topics and groups would not apply there: enable one "
                              "on the target (authorizer.class.name), or run with acls=off")
        compared = compare(expected, on_target)
        missing = missing_principals(source_admin, target_admin, expected)
        quotas, quotas_to_set = _quotas(source, target, expected)
        allowed = operation_names(cluster_operations(target_admin)) if quotas_to_set or compared["to_add"] else None
        if quotas_to_set and not _may(allowed, "ALTER_CONFIGS"):
            raise MissingAcls(f"{len(quotas_to_set)} client quotas of the applications' users are not on the target, "
                              "and the run's principal lacks AlterConfigs on the target cluster, which setting them "
                              "needs: grant it, or run with acls=off and set them yourself; nothing was written")
        if compared["to_add"] and not _may(allowed, "ALTER"):
            raise MissingAcls(f"{len(compared['to_add'])} of the applications' ACLs on the selected topics and groups "
                              "are not on the target, and the run's principal lacks Alter on the target cluster, which "
                              "creating them needs: grant it, or run with acls=off and create them yourself (the dry "
                              "run lists them); nothing was written")
    return {"scope": scope, "source_authorizer": True, "expected": [a.row() for a in expected],
            **{k: [a.row() for a in v] for k, v in compared.items()},
            "principals_missing": missing, "quotas": quotas, "quotas_to_set": quotas_to_set}


def shown(planned: Mapping[str, Any]) -> dict[str, Any]:
    """The plan as a dry run shows it: counts, and each binding to add or in conflict as a line."""
    if planned.get("scope") == "off":
        return {"scope": "off"}
    if not planned.get("source_authorizer"):
        return {"scope": planned["scope"], "source_authorizer": False}
    return {"scope": planned["scope"], "expected": len(planned["expected"]), "present": len(planned["present"]),
            "to_add": [Acl.from_row(r).text() for r in planned["to_add"]],
            "conflicting": [Acl.from_row(r).text() for r in planned["conflicting"]],
            "quotas_to_set": [f"{quota_wire.shown(r['entity'])}: {r['values']}" for r in planned["quotas_to_set"]],
            "principals_missing": [f"{r['principal']}: {r['do']}" for r in planned["principals_missing"]]}


def copy_acls(source: ClusterConfig, target: ClusterConfig, topics: Collection[str], groups: Collection[str],
              scope: str, names: Mapping[str, str] | None = None, group_names: Mapping[str, str] | None = None
              ) -> dict[str, Any]:
    """The plan, with its missing bindings created on the target (CreateAcls is idempotent: a binding
    there already stays as it is) and the target read again: `on_target`, the expected ones there."""
    planned = plan(source, target, topics, groups, scope, names, group_names)
    to_add = [Acl.from_row(r) for r in planned.get("to_add", [])]
    if not planned.get("expected"):
        return {**planned, "created": [], "on_target": 0}
    quota_wire.alter(target, {tuple(map(tuple, r["entity"])): r["values"] for r in planned["quotas_to_set"]})
    with ClusterAdmin(target) as admin:
        if to_add:
            try:
                for future in admin.client.create_acls([a.binding() for a in to_add], request_timeout=30).values():
                    future.result(timeout=60)
            except KafkaException as exc:
                hint = ("the run's principal needs Alter on the target cluster to create ACLs; grant it, or run with "
                        "acls=off and create them yourself: " if exc.args[0].code() ==
                        KafkaError.CLUSTER_AUTHORIZATION_FAILED else "")
                raise ConfigError(f"creating {len(to_add)} ACLs on the target failed: {hint}"
                                  f"{exc.args[0].str()}") from exc
        on_target = _acls_there(admin, [Acl.from_row(r) for r in planned["expected"]])
    return {**planned, "created": [a.row() for a in to_add], "on_target": on_target,
            "quotas_on_target": _quotas_there(target, planned["quotas"])}


def _acls_there(admin: ClusterAdmin, expected: list[Acl]) -> int:
    """How many of `expected` the target holds (CreateAcls returns before every broker applies them)."""
    def there() -> int:
        now = set(read_acls(admin, "target") or [])
        return sum(a in now for a in expected)
    return _once_all_there(there, len(expected))


def _quotas_there(target: ClusterConfig, quotas: list[dict]) -> int:
    """How many of `quotas` the target holds with their values (an alteration reaches the brokers
    shortly after it is accepted)."""
    def there() -> int:
        now = quota_wire.describe(target)
        return sum(all(now.get(tuple(map(tuple, r["entity"])), {}).get(k) == v for k, v in r["values"].items())
                   for r in quotas)
    return _once_all_there(there, len(quotas))


def _once_all_there(there: Callable[[], int], expected: int, wait_s: float = 10.0) -> int:
    """`there()`, read again until it counts all `expected` or `wait_s` passed: what the target holds
    of what was just written to it."""
    deadline = time.monotonic() + wait_s
    while True:
        found = there()
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def migrate_acls(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, scope: str,
                 renames: Renames = Renames()) -> dict[str, Any]:
    """`copy_acls` for the snapshot's topics and groups (under the run's `renames`), each attempt
    recorded (part acls/<attempt>)."""
    snapshot = read_snapshot(manifest)
    topics, groups = sorted(snapshot["topics"]), sorted(snapshot.get("groups") or {})
    result = copy_acls(source, target, topics, groups, scope, renames.topic_names(topics), renames.group_names(groups))
    manifest.write_once(Part.attempt(PART), result)
    return result


def summary(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's figures: bindings expected on the target, there now, created, principals missing."""
    record = record or {}
    return {"acls_scope": record.get("scope"), "acls_expected": len(record.get("expected", [])),
            "acls_on_target": record.get("on_target", 0), "acls_created": len(record.get("created", [])),
            "quotas_expected": len(record.get("quotas", [])), "quotas_on_target": record.get("quotas_on_target", 0),
            "principals_missing": [r["principal"] for r in record.get("principals_missing", [])]}


def report_lines(record: Mapping[str, Any] | None) -> list[str]:
    """The report's section: each binding expected on the target and what the run did with it."""
    if not record or record.get("scope") == "off":
        return ["## ACLs", "", "None copied (acls=off).", ""]
    if not record.get("source_authorizer"):
        return ["## ACLs", "", "The source has no authorizer: no ACL to copy.", ""]
    created = {Acl.from_row(r) for r in record.get("created", [])}
    lines = ["## ACLs", "", f"Scope {record['scope']}: {len(record['expected'])} bindings of the applications expected "
             f"on the target, {record['on_target']} there after the run ({len(created)} created by it).", "",
             "| principal | permission | operation | resource | pattern | host | on the target |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for a in map(Acl.from_row, record["expected"]):
        lines.append(f"| {a.principal} | {a.permission} | {a.operation} | {a.resource} {a.name} | {a.pattern.lower()} "
                     f"| {a.host} | {'created' if a in created else 'there already'} |")
    lines += [""] + [f"- conflicting on the target, left as it is: {Acl.from_row(r).text()}"
                     for r in record.get("conflicting", [])]
    lines += [f"- {r['principal']} is missing on the target: {r['do']}" for r in record.get("principals_missing", [])]
    lines += [f"- client quota of {quota_wire.shown(r['entity'])}: "
              + ", ".join(f"{k} {v:g}" for k, v in sorted(r["values"].items())) for r in record.get("quotas", [])]
    return lines + [""]
