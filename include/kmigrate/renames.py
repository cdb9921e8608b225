"""The names a run gives things on the target (a consolidation migration: topic `orders` of the
source becomes `a.orders` on the target, its consumer group `billing` becomes `a.billing`).

The rule, for a topic and for a consumer group alike: an explicit map entry wins (`topic_renames`,
`group_renames`: source name to target name); otherwise the prefix and the name (`topic_prefix`,
`group_prefix`; none: the name itself). A rename changes names only, never offsets: a renamed
topic's partition p holds on the target the source's partition p, each record at the source's
offset o (a translate-mode topic's offsets go through its offset map as without a rename), so a
group's committed offsets carry over to the group's target id as they are.

`check_topics` and `check_groups` hold the rule to the run's selection: every map entry names
something selected, no two sources become one target, and every target topic name is one Kafka
creates (Kafka's topic name rule, no internal `__` name, no two names that clash once '.' is read
as '_') and not kmigrate's own claims topic."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kmigrate.errors import ConfigError

TOPIC_MAX = 249  # Kafka's longest topic name
TOPIC_CHARACTERS = "A-Za-z0-9._-"  # all a topic name may hold (Kafka's org.apache.kafka.common.internals.Topic)
TOPIC_RULE = f"1 to {TOPIC_MAX} ASCII letters, digits and . _ -, neither '.' nor '..'"
# a topic prefix, as the trigger form states it too (kmigrate_airflow.params): at least one character of a name
# after it, and not the start of an internal topic's name
PREFIX_PATTERN = rf"(?!__)[{TOPIC_CHARACTERS}]{{0,{TOPIC_MAX - 1}}}"
_TOPIC = re.compile(rf"[{TOPIC_CHARACTERS}]{{1,{TOPIC_MAX}}}")
_PREFIX = re.compile(PREFIX_PATTERN)
# kmigrate's own topic on a target (kmigrate.claims.log.CLAIMS_TOPIC: the runs' claims of their topics), named
# here so that the rule stays at the bottom of the library
CLAIMS_TOPIC = "kmigrate-claims"
# the params that state the rule, as `from_params` reads them (the run records its params as given)
PARAMS = ("topic_prefix", "topic_renames", "group_prefix", "group_renames", "connector_topic_keys")


def legal_topic(name: str) -> bool:
    """Whether Kafka takes `name` as a topic's name (TOPIC_RULE)."""
    return bool(_TOPIC.fullmatch(name)) and name not in (".", "..")


class _Names(Mapping[str, Any]):
    """An unchangeable map of names (to names, or to tuples of them), sorted by key: equal to any
    mapping of the same pairs, and hashable (a Renames is a frozen value)."""

    __slots__ = ("_map",)

    def __init__(self, pairs: Mapping[str, str]) -> None:
        self._map = dict(sorted(pairs.items()))

    def __getitem__(self, key: str) -> Any:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return hash(tuple(self._map.items()))

    def __repr__(self) -> str:
        return repr(self._map)


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


@dataclasses.dataclass(frozen=True)
class Renames:
    """A run's rule for the names on the target (see the module's docstring): `topic_prefix` and
    `topics` (source topic to target topic; its param is `topic_renames`), `group_prefix` and
    `groups` (source group id to target group id; `group_renames`), and `connector_keys` (a
    connector's config keys beyond those this project knows whose values name topics, renamed as
    those are: `connector_topic_keys`, {connector: [key, ...]}). The empty rule (`Renames()`, false)
    keeps every name. Built with wrong types, or a prefix no topic name can begin with, it raises
    ConfigError naming the param."""

    topic_prefix: str = ""
    topics: Mapping[str, str] = _Names({})
    group_prefix: str = ""
    groups: Mapping[str, str] = _Names({})
    connector_keys: Mapping[str, tuple[str, ...]] = _Names({})

    def __post_init__(self) -> None:
        for name, value in (("topic_prefix", self.topic_prefix), ("group_prefix", self.group_prefix)):
            if not isinstance(value, str):
                raise ConfigError(f"{name} is {type(value).__name__} {value!r}; give a string (e.g. 'team-a.'), or "
                                  "leave it empty for none")
        _check_prefix(self.topic_prefix)
        for field, param, what in (("topics", "topic_renames", "topic"), ("groups", "group_renames", "group")):
            object.__setattr__(self, field, _Names(_check_map(param, what, getattr(self, field))))
        object.__setattr__(self, "connector_keys", _Names(_check_keys(self.connector_keys)))

    def topic(self, name: str) -> str:
        """The target name of source topic `name`: its map entry, else the prefix and the name."""
        return self.topics.get(name, self.topic_prefix + name)

    def group(self, name: str) -> str:
        """The target id of source consumer group `name`: its map entry, else the prefix and the id."""
        return self.groups.get(name, self.group_prefix + name)

    def topic_names(self, names: Iterable[str]) -> dict[str, str]:
        """Each of the source topics `names` to its target name (unchecked: `check_topics` checks)."""
        return {name: self.topic(name) for name in names}

    def group_names(self, names: Iterable[str]) -> dict[str, str]:
        """Each of the source groups `names` to its target id (unchecked: `check_groups` checks)."""
        return {name: self.group(name) for name in names}

    def only(self, topics: Iterable[str], groups: Iterable[str]) -> Renames:
        """The rule with its map entries restricted to the source `topics` and `groups` (the prefixes
        kept): the same names for those, no entry for anything else. What a run that moves a mirror's
        selection under the mirror's names checks (a planned failover, a drill of a mirror): an entry
        of the mirror's whose topic or group is not selected now (promoted or moved since, deleted on
        the source) is none of the run's doing, where a migration's own entry for a name it does not
        select is a typo that `check_topics` and `check_groups` refuse."""
        topics, groups = set(topics), set(groups)
        return dataclasses.replace(self, topics={s: t for s, t in self.topics.items() if s in topics},
                                   groups={s: t for s, t in self.groups.items() if s in groups})

    def __bool__(self) -> bool:
        """Whether the rule renames anything (a prefix or a map entry is set; connector keys alone rename
        nothing)."""
        return bool(self.topic_prefix or self.topics or self.group_prefix or self.groups)

    def check_topics(self, source_topics: Iterable[str]) -> dict[str, str]:
        """The run's selected `source_topics`, each to its target name, sorted by source name; or
        ConfigError naming every offending topic: a topic_renames entry for a topic not selected, a
        target name Kafka refuses (TOPIC_RULE), one beginning with '__' (Kafka's internal topics)
        that is not the source's own name, kmigrate's claims topic, two sources onto one target,
        and two target names that collide once '.' is read as '_' (Kafka refuses to create the
        second: their metrics' names clash)."""
        selected = sorted(set(source_topics))
        names = self.topic_names(selected)
        problems = []
        if unknown := set(self.topics) - set(selected):
            problems.append(f"topic_renames names topics the run does not select ({_listed(unknown)}): select "
                            "them (topics_include, topics_exclude) or drop their entries")
        if illegal := [f"{s} -> {t!r}" for s, t in names.items() if not legal_topic(t)]:
            problems.append(f"these target topic names are not topic names Kafka takes ({TOPIC_RULE}): "
                            f"{_listed(illegal)}; give others in topic_renames, or a shorter topic_prefix")
        if internal := [f"{s} -> {t}" for s, t in names.items() if t.startswith("__") and t != s]:
            problems.append(f"these target topic names begin with '__', which marks Kafka's internal topics: "
                            f"{_listed(internal)}; give others in topic_renames or topic_prefix")
        if claims := [f"{s} -> {t}" for s, t in names.items() if t == CLAIMS_TOPIC]:
            problems.append(f"{CLAIMS_TOPIC} is kmigrate's own topic on the target (the runs' claims), no target "
                            f"topic's name: {_listed(claims)}; give another name in topic_renames")
        by_target = _sources_by(names, lambda target: target)
        if shared := [f"{_listed(sources)} -> {target}" for target, sources in by_target.items() if len(sources) > 1]:
            problems.append(f"several source topics would become one target topic: {'; '.join(sorted(shared))}; "
                            "give each its own name in topic_renames")
        clashes = []
        for sources in _sources_by(names, lambda target: target.replace(".", "_")).values():
            if len(targets := {names[s] for s in sources}) > 1:
                clashes.append(" and ".join(f"{t} (from {_listed(s for s in sources if names[s] == t)})"
                                            for t in sorted(targets)))
        if clashes:
            problems.append("these target topic names collide once '.' is read as '_' (Kafka refuses to create the "
                            f"second, their metrics' names clash): {'; '.join(sorted(clashes))}; give one of each "
                            "another name in topic_renames")
        if problems:
            raise ConfigError(_refused("topic", problems))
        return names

    def check_groups(self, source_groups: Iterable[str]) -> dict[str, str]:
        """The run's selected `source_groups`, each to its target id, sorted by source id; or
        ConfigError naming every offending group: a group_renames entry for a group not selected,
        two sources onto one target id, an empty target id."""
        selected = sorted(set(source_groups))
        ids = self.group_names(selected)
        problems = []
        if unknown := set(self.groups) - set(selected):
            problems.append(f"group_renames names consumer groups the run does not select ({_listed(unknown)}): "
                            "select them (groups) or drop their entries")
        if empty := [s for s, t in ids.items() if not t]:
            problems.append(f"these consumer groups would have an empty id on the target: {_listed(map(repr, empty))};"
                            " give each a non-empty id in group_renames")
        if shared := [f"{_listed(sources)} -> {target}" for target, sources in _sources_by(ids, lambda t: t).items()
                      if len(sources) > 1]:
            problems.append(f"several source consumer groups would become one target group: {'; '.join(sorted(shared))}"
                            "; give each its own id in group_renames")
        if problems:
            raise ConfigError(_refused("consumer group", problems))
        return ids

    def as_params(self) -> dict[str, Any]:
        """The params that state this rule (`from_params` reads them back), those left empty left out."""
        params = {"topic_prefix": self.topic_prefix, "topic_renames": dict(self.topics),
                  "group_prefix": self.group_prefix, "group_renames": dict(self.groups),
                  "connector_topic_keys": {name: list(keys) for name, keys in self.connector_keys.items()}}
        return {name: value for name, value in params.items() if value}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Renames:
        """The rule of a run's params (PARAMS; each absent, null or empty: none). ConfigError naming
        the param of a wrong type, or a topic_prefix no topic name can begin with."""
        def given(name: str, empty: Any) -> Any:
            value = params.get(name)
            return empty if value is None or value == "" else value

        return cls(given("topic_prefix", ""), given("topic_renames", {}), given("group_prefix", ""),
                   given("group_renames", {}), given("connector_topic_keys", {}))


def partitions_there(keys: Iterable[tuple[str, int]], names: Mapping[str, str]) -> dict[tuple[str, int], tuple[str, int]]:
    """Each partition of `keys` ((topic, partition), by the source's names) under its topic's name
    on the target (`names`; a topic not in it keeps its name), to the partition as given: what a
    reading of the target asks for, and how its answers are keyed back."""
    return {(names.get(t, t), p): (t, p) for t, p in keys}


def from_target(values: Mapping[tuple[str, int], Any], names: Mapping[str, str]) -> dict[tuple[str, int], Any]:
    """`values` keyed by partitions as the target names them (a group's offsets read there) keyed by the
    source's partitions of `names` ({source topic: target topic}); a value on a target topic that is
    none of theirs left out (it may bear a source topic's name and belong to another application)."""
    source_of = {target: source for source, target in names.items()}
    return {(source_of[t], p): value for (t, p), value in values.items() if t in source_of}


def one_prefix(names: Mapping[str, str], sources: Iterable[str]) -> str | None:
    """The one prefix that renames each of `sources` under `names` ({source: target}; a source not
    in it keeps its name): "" when none is renamed; None when no single prefix does (a map entry
    that is not prefix and name, two prefixes, or no source at all). What a pattern over the
    sources' names needs in front of it to match their target names."""
    prefixes = {names.get(s, s)[:-len(s)] if names.get(s, s).endswith(s) else None for s in sources}
    return prefixes.pop() if len(prefixes) == 1 and None not in prefixes else None


def _refused(what: str, problems: list[str]) -> str:
    """The refusal of the `what` renames for `problems` (each naming what breaks a rule, and the way out)."""
    if len(problems) == 1:
        return f"the {what} renames are refused: {problems[0]}"
    return f"the {what} renames are refused, {len(problems)} reasons: " + " ".join(
        f"({n}) {problem}." for n, problem in enumerate(problems, 1))[:-1]


def _sources_by(names: Mapping[str, str], key: Callable[[str], str]) -> dict[str, list[str]]:
    """The sources of `names` (source to target) by `key` of their target."""
    out: dict[str, list[str]] = {}
    for source, target in names.items():
        out.setdefault(key(target), []).append(source)
    return out


def _check_prefix(prefix: str) -> None:
    """ConfigError unless a topic name can begin with `prefix` (PREFIX_PATTERN)."""
    if _PREFIX.fullmatch(prefix):
        return
    if prefix.startswith("__"):
        raise ConfigError(f"topic_prefix {prefix!r} begins with '__', which marks Kafka's internal topics; give a "
                          "prefix that does not")
    if bad := sorted({c for c in prefix if not re.fullmatch(f"[{TOPIC_CHARACTERS}]", c)}):
        raise ConfigError(f"topic_prefix {prefix!r} holds {', '.join(map(repr, bad))}, which no topic name may; give "
                          f"ASCII letters, digits and . _ - only (Kafka's topic names)")
    raise ConfigError(f"topic_prefix is {len(prefix)} characters long; a topic name holds at most {TOPIC_MAX}, so "
                      f"give a prefix of at most {TOPIC_MAX - 1}")


def _check_keys(value: Any) -> dict[str, tuple[str, ...]]:
    """`value` as {connector: (key, ...)} when it maps connector names to lists of config keys, else
    ConfigError naming connector_topic_keys and the wrong entries."""
    example = '{"orders-sink": ["audit.topic"]}'
    if not isinstance(value, Mapping):
        raise ConfigError(f"connector_topic_keys is {type(value).__name__} {value!r}; give a JSON object of connector "
                          f"names to lists of their config keys that name topics ({example}), or leave it empty")
    wrong = [f"{k!r}: {v!r}" for k, v in value.items() if not isinstance(k, str) or not k
             or isinstance(v, str) or not isinstance(v, (list, tuple)) or not v
             or not all(isinstance(key, str) and key for key in v)]
    if wrong:
        raise ConfigError(f"connector_topic_keys maps {', '.join(sorted(wrong))}, not a connector to a list of its "
                          f"config keys; give e.g. {example}")
    return {name: tuple(dict.fromkeys(keys)) for name, keys in value.items()}


def _check_map(param: str, what: str, value: Any) -> Mapping[str, str]:
    """`value` when it maps names to names (strings), else ConfigError naming `param` and the wrong entries."""
    example = '{"orders": "a.orders"}' if what == "topic" else '{"billing": "a.billing"}'
    if not isinstance(value, Mapping):
        raise ConfigError(f"{param} is {type(value).__name__} {value!r}; give a JSON object of source {what} names "
                          f"to target {what} names ({example}), or leave it empty for none")
    if wrong := [f"{k!r}: {v!r}" for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)]:
        raise ConfigError(f"{param} maps {', '.join(sorted(wrong))}, not a name to a name; give a JSON object of "
                          f"source {what} names to target {what} names, strings ({example})")
    return value
