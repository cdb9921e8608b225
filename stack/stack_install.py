"""The local stack's installer: Apache Kafka's jars (broker, ZooKeeper before 4.0, Connect and its
plugins) resolved with mvn from Maven Central (or KMIGRATE_MAVEN_MIRROR) into .cache/, at the versions
pinned here; and the Java runtime that runs them. Standard library only."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from stack_common import PROJECT_DIR, StackError

POM = PROJECT_DIR / "stack" / "pom.xml"
KAFKA_VERSION = "4.3.1"
CACHE_DIR = Path(os.environ.get("KMIGRATE_CACHE_DIR", PROJECT_DIR / ".cache"))
KAFKA_HOME = CACHE_DIR / f"kafka-{KAFKA_VERSION}"
# The sources the compat profile starts (`--source-version`): brokers (ZooKeeper-era before 4.0) and
# Connect of that version, from Maven Central like the rest; its target is KAFKA_VERSION on KRaft, or
# one of TARGET_VERSIONS (`--target-version`).
SOURCE_VERSIONS = ("4.4.0", "4.3.1", "3.9.1", "2.8.2")
TARGET_VERSIONS = ("4.3.1", "4.4.0")
# Connect plugins (connect-file, connect-mirror) of a release that Maven Central did not serve here when
# the release was added (2026-11-26: 4.4.0's broker and Connect runtime resolved, its plugins did not):
# the nearest earlier release's. The file connectors of 4.3.1 ask the clients' AppInfoParser for their
# version, which 4.4.0 moved (to common.utils.internals): their plugin directory gets that release's
# kafka-clients too, from which the worker's plugin loader takes what its own clients lack.
PLUGIN_VERSIONS = {"4.4.0": "4.3.1"}
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
BASIC_AUTH_EXTENSION = "connect-basic-auth-extension"


def kafka_home(version: str) -> Path:
    return CACHE_DIR / f"kafka-{version}"


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError(
            "java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    return found


def check_java() -> str:
    java = java_binary()
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    text = out.stderr + out.stdout
    try:
        quoted = text.split('"')[1]
        major = int(quoted.split(".")[0])
    except (IndexError, ValueError):
        raise StackError(f"{java} -version printed no version; install a Java 17+ runtime or set JAVA_HOME") from None
    if major < 17:
        raise StackError(f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java 17+: install one or set JAVA_HOME")
    return java


def mvn_binary() -> str:
    found = shutil.which("mvn")
    if not found:
        raise StackError("mvn not found: install Apache Maven (Debian: apt-get install maven)")
    return found


def maven_settings_args(workdir: Path) -> list[str]:
    """KMIGRATE_MAVEN_MIRROR (a repository URL) replaces Maven Central, e.g. a company mirror."""
    mirror = os.environ.get("KMIGRATE_MAVEN_MIRROR")
    if not mirror:
        return []
    settings = workdir / "maven-settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>kmigrate-mirror</id><mirrorOf>*</mirrorOf>"
        f"<url>{mirror}</url></mirror></mirrors></settings>\n"
    )
    return ["-s", str(settings)]


def installed_marker(home: Path = KAFKA_HOME) -> Path:
    return home / ".complete"


def install(home: Path = KAFKA_HOME, version: str = KAFKA_VERSION) -> Path:
    """Resolve the broker (with ZooKeeper before 4.0), Connect runtime and plugins of Kafka `version`
    into `home`; a no-op once complete."""
    if installed_marker(home).exists():
        return home
    check_java()
    mvn = mvn_binary()
    repo = CACHE_DIR / "m2"
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"stack: resolving Apache Kafka {version} from Maven Central into {home} ...", flush=True)
    base = [mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={repo}", f"-Dkafka.version={version}",
            *maven_settings_args(partial)]
    plugins = PLUGIN_VERSIONS.get(version, version)
    steps = [
        [*base, f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={partial / 'libs'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-file:{plugins}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-file'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror:{plugins}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror-client:{plugins}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
    ]
    if plugins != version:
        steps.append([*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:kafka-clients:{plugins}",
                      f"-DoutputDirectory={partial / 'plugins' / 'connect-file'}"])
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            log = partial.with_name("mvn-error.log")
            log.write_text(result.stdout + result.stderr)
            detail = next((ln for ln in (result.stdout + result.stderr).splitlines() if "[ERROR]" in ln), "")
            unreachable = any(
                s in result.stdout + result.stderr
                for s in ("Could not transfer", "Unknown host", "Connection refused", "connect timed out",
                          "Network is unreachable", "Could not resolve")
            )
            if unreachable:
                raise StackError(
                    "Maven Central is unreachable, so the Kafka jars cannot be downloaded: check the network "
                    "or set KMIGRATE_MAVEN_MIRROR to a reachable mirror, then run again "
                    f"(mvn output in {log})"
                )
            raise StackError(f"mvn failed resolving Kafka {version}: {detail.strip()} (full output in {log})")
    # older versions bring their own log4j 1 binding of SLF4J; the stack logs through log4j2 (the POM's)
    for binding in (partial / "libs").glob("slf4j-*log4j12-*.jar"):
        binding.unlink()
    for binding in (partial / "libs").glob("slf4j-reload4j-*.jar"):
        binding.unlink()
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)
    installed_marker(home).write_text(version + "\n")
    return home


def ensure_basic_auth_extension(home: Path = KAFKA_HOME) -> None:
    """Connect's basic-authentication REST extension in libs/ (the secure profile's workers use it)."""
    ensure_artifact(BASIC_AUTH_EXTENSION, home / "libs")


def tools_classpath(home: Path = KAFKA_HOME) -> str:
    """The class path of Kafka's own tools (kafka-producer-perf-test's ProducerPerformance), fetched
    into tools/ on first use: `make bench-copy` measures the brokers with Kafka's own producer."""
    ensure_artifact("kafka-tools", home / "tools")
    return f"{home / 'tools' / '*'}:{home / 'libs' / '*'}"


def ensure_artifact(artifact: str, folder: Path) -> None:
    """org.apache.kafka:`artifact` of the stack's Kafka version in `folder`, fetched once with mvn."""
    if any(folder.glob(f"{artifact}-*.jar")):
        return
    mvn = mvn_binary()
    step = [mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={CACHE_DIR / 'm2'}", *maven_settings_args(folder.parent),
            f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:{artifact}:{KAFKA_VERSION}",
            f"-DoutputDirectory={folder}"]
    result = subprocess.run(step, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"mvn could not fetch org.apache.kafka:{artifact}:{KAFKA_VERSION}: "
                         f"{(result.stdout + result.stderr).strip()[-400:]}")
