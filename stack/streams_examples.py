#!/usr/bin/env python3
"""Apache Kafka's Kafka Streams examples (org.apache.kafka:kafka-streams-examples) for the local stack:
resolved from Maven Central with mvn into .cache/, and the command that runs one of them.

    python3 stack/streams_examples.py install    # once; offline afterwards

Standard library only, like stack.py, whose version pin, cache and Maven settings it shares."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "streams-pom.xml"
WORDCOUNT = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"


def _stack():
    if "kmigrate_stack" in sys.modules:
        return sys.modules["kmigrate_stack"]
    spec = importlib.util.spec_from_file_location("kmigrate_stack", HERE / "stack.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kmigrate_stack"] = module
    spec.loader.exec_module(module)
    return module


def home() -> Path:
    stack = _stack()
    return stack.CACHE_DIR / f"kafka-streams-examples-{stack.KAFKA_VERSION}"


def install() -> Path:
    """The examples jar and its run-time dependencies (kafka-streams, kafka-clients, RocksDB) in
    home()/libs; a no-op once complete. StackError (stack.py's) when mvn or Maven Central fails."""
    stack = _stack()
    target = home()
    if (target / ".complete").exists():
        return target
    stack.check_java()
    mvn = shutil.which("mvn")
    if not mvn:
        raise stack.StackError("mvn not found: install Apache Maven (Debian: apt-get install maven)")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"stack: resolving kafka-streams-examples {stack.KAFKA_VERSION} from Maven Central into {target} ...",
          flush=True)
    done = subprocess.run([mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={stack.CACHE_DIR / 'm2'}",
                           f"-Dkafka.version={stack.KAFKA_VERSION}", *stack.maven_settings_args(partial),
                           f"{stack.DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                           f"-DoutputDirectory={partial / 'libs'}"], capture_output=True, text=True)
    if done.returncode != 0:
        log = partial.with_name(partial.name + "-mvn-error.log")
        log.write_text(done.stdout + done.stderr)
        raise stack.StackError(f"mvn could not resolve kafka-streams-examples {stack.KAFKA_VERSION} (output in {log}); "
                               "check that Maven Central (or KMIGRATE_MAVEN_MIRROR) is reachable")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").write_text(stack.KAFKA_VERSION + "\n")
    return target


def command(main_class: str, *args: str) -> list[str]:
    """The java command line that runs `main_class` of the examples with `args`."""
    return [_stack().java_binary(), "-Xmx256m", "-cp", str(install() / "libs" / "*"), main_class, *args]


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print("usage: streams_examples.py install", file=sys.stderr)
        sys.exit(2)
    try:
        print(f"stack: Kafka Streams examples in {install()}")
    except _stack().StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        sys.exit(2)
