"""What a run moves: topics, consumer groups, connectors and translate-mode topics, chosen by
regular expressions fully matched against names."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin


def compile_pattern(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"the {what} pattern {pattern!r} is not a valid regular expression ({exc}); fix it") from exc


def select(names: Iterable[str], include: str, exclude: str | None = None, what: str = "topic") -> list[str]:
    """Names that fully match `include` and not `exclude`. Kafka's own internal topics (`__*`) are
    never selected."""
    wanted = compile_pattern(include, f"{what} include")
    unwanted = compile_pattern(exclude, f"{what} exclude") if exclude else None
    return sorted(n for n in names if not n.startswith("__") and wanted.fullmatch(n)
                  and not (unwanted and unwanted.fullmatch(n)))


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a run moves: topics (include/exclude regexes), consumer groups (regex, empty: none),
    connectors (names; empty: none), and the topics copied in translate mode (regex, empty: none)."""

    topics_include: str
    topics_exclude: str = ""
    groups: str = ""
    connectors: tuple[str, ...] = ()
    translate: str = ""

    def check(self) -> None:
        compile_pattern(self.topics_include, "topic include")
        for pattern, what in ((self.topics_exclude, "topic exclude"), (self.groups, "consumer group"),
                              (self.translate, "translate topics")):
            if pattern:
                compile_pattern(pattern, what)

    def modes(self, topics: Sequence[str]) -> dict[str, str]:
        pattern = compile_pattern(self.translate, "translate topics") if self.translate else None
        return {t: "translate" if pattern and pattern.fullmatch(t) else "preserve" for t in topics}


def selected_topics(source: ClusterConfig, selection: Selection) -> list[str]:
    with ClusterAdmin(source) as admin:
        return select(admin.list_topics(), selection.topics_include, selection.topics_exclude)
