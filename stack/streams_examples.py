#!/usr/bin/env python3
"""Apache Kafka's Kafka Streams examples (org.apache.kafka:kafka-streams-examples) for the local stack:
resolved from Maven Central with mvn into .cache/, and the command that runs one of them.

    python3 stack/streams_examples.py install    # once; offline afterwards

Standard library only, like stack.py, whose version pin, cache and Maven settings it shares
(stack_install.py)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from stack_common import StackError  # beside it: its importers have stack/ on sys.path
from stack_install import (CACHE_DIR, DEPENDENCY_PLUGIN, KAFKA_VERSION, check_java, java_binary, maven_settings_args,
                           mvn_binary)

POM = Path(__file__).resolve().parent / "streams-pom.xml"
WORDCOUNT = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"


def home() -> Path:
    return CACHE_DIR / f"kafka-streams-examples-{KAFKA_VERSION}"


def _resolved_mark() -> str:
    """What a complete resolution records: the version and the pom it resolved."""
    return f"{KAFKA_VERSION}\n{hashlib.sha256(POM.read_bytes()).hexdigest()}\n"


def install() -> Path:
    """The examples jar and its run-time dependencies (kafka-streams, kafka-clients, RocksDB) in
    home()/libs; a no-op once complete for the pom as it is (a pom changed since resolves again).
    StackError when mvn or Maven Central fails."""
    target = home()
    if (target / ".complete").exists() and (target / ".complete").read_text() == _resolved_mark():
        return target
    check_java()
    mvn = mvn_binary()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"stack: resolving kafka-streams-examples {KAFKA_VERSION} from Maven Central into {target} ...",
          flush=True)
    done = subprocess.run([mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={CACHE_DIR / 'm2'}",
                           f"-Dkafka.version={KAFKA_VERSION}", *maven_settings_args(partial),
                           f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                           f"-DoutputDirectory={partial / 'libs'}"], capture_output=True, text=True)
    if done.returncode != 0:
        log = partial.with_name(partial.name + "-mvn-error.log")
        log.write_text(done.stdout + done.stderr)
        raise StackError(f"mvn could not resolve kafka-streams-examples {KAFKA_VERSION} (output in {log}); "
                               "check that Maven Central (or KMIGRATE_MAVEN_MIRROR) is reachable")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").write_text(_resolved_mark())
    return target


def command(main_class: str, *args: str) -> list[str]:
    """The java command line that runs `main_class` of the examples with `args`."""
    return [java_binary(), "-Xmx256m", "-cp", str(install() / "libs" / "*"), main_class, *args]


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print("usage: streams_examples.py install", file=sys.stderr)
        sys.exit(2)
    try:
        print(f"stack: Kafka Streams examples in {install()}")
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        sys.exit(2)
