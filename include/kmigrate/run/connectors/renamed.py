"""A connector's config on the target when the run renames its topics (docs/DESIGN.md §14).

Connect names a connector's topics in its config, and the keys differ by connector. The keys known
here are rewritten: every sink's `topics` (Connect's own list of the topics a sink reads),
`topics.regex` (its pattern, rewritten only where one prefix renames every selected topic it
matches: `a\\.(?:pattern)`) and `errors.deadletterqueue.topic.name` (its dead letter queue), the
`topic` of the file source that ships with Kafka, and the keys the run names for a connector
(`connector_topic_keys`: values that are lists of topics, rewritten item by item). Any other key
whose value names a renamed topic (as a whole item of a comma- or space-separated value) is one the
run cannot rewrite safely: it is refused by name before anything is stopped, unless the run names
it in `connector_topic_keys` or its `connector_overrides` sets that key on the target. A connector's offsets follow its topics: a
sink's `kafka_topic` takes the target's name (`translated_offsets`)."""
from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.renames import one_prefix

SINK_TOPICS, SINK_REGEX = "topics", "topics.regex"
SINK_DLQ = "errors.deadletterqueue.topic.name"  # Connect's own: the topic a sink's failed records go to
# a source connector's keys that name the topic it writes, by class
SOURCE_TOPIC_KEYS = {"org.apache.kafka.connect.file.FileStreamSourceConnector": ("topic",)}
_ITEMS = re.compile(r"[\s,;]+")


def renamed_config(name: str, kind: str, config: Mapping[str, str], names: Mapping[str, str], *,
                   overridden: Collection[str] = (), keys: Collection[str] = ()) -> dict[str, str]:
    """Connector `name`'s config (of `kind` "source" or "sink") with the topics it names renamed per
    `names` ({source topic: target topic} of the run's topics; those not in it keep their names),
    in the keys known here and in `keys` (the run's connector_topic_keys of this connector). Keys in
    `overridden` (the run's connector_overrides of this connector) are left as they are: the
    override sets them. ConfigError naming each key this cannot rewrite, and the way out."""
    renamed = {t: n for t, n in names.items() if t != n}
    out = dict(config)
    if not renamed:
        return out
    keys = set(SOURCE_TOPIC_KEYS.get(config.get("connector.class", ""), ())) | set(keys)
    if kind == "sink":
        keys |= {SINK_TOPICS, SINK_DLQ}
    problems = []
    for key in sorted(keys - set(overridden)):
        if key in out:
            out[key] = ",".join(renamed.get(t, t) for t in _ITEMS.split(out[key].strip()) if t)
    if kind == "sink" and SINK_REGEX in out and SINK_REGEX not in overridden:
        rewritten = _renamed_regex(out[SINK_REGEX], names)
        if rewritten is None:
            problems.append(f"{SINK_REGEX} ({out[SINK_REGEX]!r}) matches topics the run renames other than by one "
                            "prefix, so no pattern on the target says the same")
        else:
            out[SINK_REGEX] = rewritten
    for key, value in sorted(out.items()):
        if key in keys or key == SINK_REGEX or key in overridden or not isinstance(value, str):
            continue
        named = sorted({item for item in _ITEMS.split(value) if item in renamed})
        if named:
            problems.append(f"{key} names {', '.join(named)}, which the run renames, and this project does not know "
                            "that key")
    if problems:
        raise ConfigError(
            f"connector {name!r}: " + "; ".join(problems) + ". Name the key in connector_topic_keys "
            f'({{"{name}": ["<key>"]}}) when its value lists topics, or set it on the target yourself in '
            f'connector_overrides ({{"{name}": {{"<key>": "<value with the target names>"}}}}), or leave the '
            "connector out. Nothing was done")
    return out


def _renamed_regex(pattern: str, names: Mapping[str, str]) -> str | None:
    """`pattern` for the target's names of the topics it matches among `names`: the prefix and the
    pattern when one prefix renames all of them (or none is renamed), else None."""
    try:
        matcher = re.compile(pattern)
    except re.error:
        return None
    matched = [t for t in names if matcher.fullmatch(t)]
    prefix = one_prefix(names, matched) if matched else ""  # none matched: nothing to rename
    if prefix is None:
        return None
    return f"{re.escape(prefix)}(?:{pattern})" if prefix else pattern


def renamed_offsets(offsets: list[dict[str, Any]], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """A sink's offsets with each `kafka_topic` under its target name."""
    return [{**o, "partition": {**o["partition"], "kafka_topic": names.get(o["partition"]["kafka_topic"],
                                                                          o["partition"]["kafka_topic"])}}
            for o in offsets]
