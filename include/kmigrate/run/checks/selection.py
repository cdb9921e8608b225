"""What a run moves: topics, consumer groups, connectors and translate-mode topics, chosen by
regular expressions fully matched against names. Every pattern is compiled by RE2
(`compile_pattern`), which matches in time linear in the name's length: a pattern like `(a+)+`,
exponential under Python's `re`, costs microseconds against a 249-character topic name. Some topics
are never selected, or only by name: Kafka's internal ones, kmigrate's claims topic, Kafka Connect's
storage topics (`select`)."""
from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

import re2

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.admin import ClusterAdmin

log = logging.getLogger(__name__)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the ConfigError says it; RE2 would also print it to stderr

# what RE2 leaves out of Python's syntax (RE2's error text, ours), and how to do without it
_UNSUPPORTED = (
    (re.compile(r"invalid escape sequence: \\[1-9g]|invalid perl operator: \(\?P$"), "a backreference",
     r"spell the repeated part out, or list the names with | (for example (orders|payments)\.v1)"),
    (re.compile(r"invalid perl operator: \(\?<?[=!]"), "a lookahead or lookbehind",
     "leave the unwanted names out with an exclude pattern (topics_exclude, for topics), or list the wanted "
     "ones with |"),
    (re.compile(r"invalid perl operator: \(\?>|bad repetition operator: [*+?]\+"),
     "an atomic group or a possessive quantifier",
     "drop it: RE2 never backtracks, so the plain group or quantifier matches the same names"),
    (re.compile(r"invalid perl operator: \(\?\("), "a conditional group", "list the alternatives with |"),
    (re.compile(r"invalid escape sequence: \\Z"), r"\Z", "drop it (the whole name is matched anyway)"),
    (re.compile(r"invalid perl operator: \(\?[a-z]*x"), "verbose mode (?x)", "write it without spaces and comments"),
    (re.compile(r"invalid repetition size"), "a repetition count over 1000", "use + or * instead of the count"),
)


def compile_pattern(pattern: str, what: str) -> Any:
    """`pattern` compiled by RE2 (match names with its `fullmatch`). ConfigError naming the
    pattern when it is not a regular expression, or uses what RE2 cannot run (backreferences,
    lookaround, ...) and then how to rewrite it."""
    if not isinstance(pattern, str):
        raise ConfigError(f"the {what} pattern {pattern!r} is not a string; give a regular expression")
    try:
        pattern.encode("utf-8")  # RE2 matches UTF-8: a lone surrogate (\ud800) is no character it can hold
    except UnicodeEncodeError as exc:
        raise ConfigError(f"the {what} pattern {pattern!r} holds {pattern[exc.start]!r} at position {exc.start}, "
                          "half of a UTF-16 surrogate pair, which is not a character (no topic or group name "
                          "holds one); remove it, or write the whole character") from None
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ConfigError(f"the {what} pattern {pattern!r} is not a valid regular expression ({exc}); "
                          "fix it") from None
    for error, construct, rewrite in _UNSUPPORTED:
        if error.search(reason):
            break
    else:
        construct, rewrite = f"a construct RE2 does not support ({reason})", \
            "rewrite it with alternation (|), character classes and repetition"
    raise ConfigError(f"the {what} pattern {pattern!r} uses {construct}, which kmigrate's regular expression engine "
                      f"(RE2: linear-time, so that no pattern can hang a run) does not support; {rewrite}")


# kmigrate's own topic on a target (kmigrate.claims.log.CLAIMS_TOPIC: the runs' claims of their topics), named
# here so that the selection does not import the claims module
CLAIMS_TOPIC = "kmigrate-claims"
# Kafka Connect's storage topics (a worker's offset.storage.topic, config.storage.topic and
# status.storage.topic) as they are usually named: Kafka's sample worker config (connect-offsets, ...),
# a prefix or a leading _ (the local stack's _connect-offsets, Confluent's images' docker-connect-offsets),
# and MirrorMaker 2's (mm2-offsets.<alias>.internal). A copy of them would hand the target's workers
# another cluster's connectors, offsets and states
CONNECT_STORAGE = re.compile(r"(?:.*[._-])?connect-(?:offsets|configs|status)|mm2-(?:offsets|configs|status)\..+\.internal")
_said: set[tuple[str, ...]] = set()  # what select has said it left out (a mirror selects again every refresh)


def named_exactly(pattern: Any, name: str) -> bool:
    """Whether the compiled `pattern` names `name` exactly: it matches it and no name one character
    away (one more before or after it, or one replaced), as `connect-offsets` or `orders|connect-offsets`
    do and `.*`, `connect-.*` or `connect.offsets` do not."""
    near = [f"x{name}", f"{name}x"] + [name[:i] + ("y" if c == "x" else "x") + name[i + 1:] for i, c in enumerate(name)]
    return bool(pattern.fullmatch(name)) and not any(pattern.fullmatch(n) for n in near)


def select(names: Iterable[str], include: str, exclude: str | None = None, what: str = "topic") -> list[str]:
    """Names that fully match `include` and not `exclude`. Never selected: Kafka's own internal
    topics (`__*`), and for topics kmigrate's claims topic (CLAIMS_TOPIC, which a run writes on a
    target: copied, it would make the target's claims another cluster's). Kafka Connect's storage
    topics (CONNECT_STORAGE) are selected only by an include pattern that names them exactly
    (`named_exactly`), never by a wildcard such as `.*`. What a pattern matched and was left out
    for these reasons is said once in the log."""
    wanted = compile_pattern(include, f"{what} include")
    unwanted = compile_pattern(exclude, f"{what} exclude") if exclude else None
    matched = sorted(n for n in names if not n.startswith("__") and wanted.fullmatch(n)
                     and not (unwanted and unwanted.fullmatch(n)))
    if what != "topic":
        return matched
    left = [n for n in matched if n == CLAIMS_TOPIC or (CONNECT_STORAGE.fullmatch(n) and not named_exactly(wanted, n))]
    if left and (include, *left) not in _said:
        _said.add((include, *left))
        storage = [n for n in left if n != CLAIMS_TOPIC]
        why = (["kmigrate's claims topic is never copied"] if CLAIMS_TOPIC in left else []) + (
            [f"Kafka Connect's storage topics only by a pattern that names them exactly (as "
             f"{'|'.join(re.escape(n) for n in storage)})"] if storage else [])
        log.info("topic include %r matches %s, left out: %s", include, ", ".join(left), "; ".join(why))
    return [n for n in matched if n not in left]


# which of the source's ACLs a run copies (kmigrate.run.targets.acls): none, the bindings of the selected
# topics and groups, or also the transactional-id and cluster bindings of the principals that hold those
SCOPES = ("off", "resources", "principals")
DEFAULT_SCOPE = "principals"


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a run moves: topics (include/exclude regexes), consumer groups (regex, empty: none),
    connectors (names; empty: none), the topics copied in translate mode (regex, empty: none), and
    which of the source's ACLs (`SCOPES`)."""

    topics_include: str
    topics_exclude: str = ""
    groups: str = ""
    connectors: tuple[str, ...] = ()
    translate: str = ""
    acls: str = DEFAULT_SCOPE

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
