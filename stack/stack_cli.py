"""Start, stop and inspect the local Kafka stack: two KRaft clusters, each with a Connect worker.

Standard library only, so it runs before the project's virtualenv exists. Every failure the
user can fix (a taken port, no java, Maven Central out of reach) ends in one line naming the
problem and the way out, exit status 2.

    python3 stack/stack.py install      # resolve the pinned Kafka jars into .cache/ (offline once cached)
    python3 stack/stack.py up           # start what is not running, wait until each service answers
    python3 stack/stack.py status
    python3 stack/stack.py down [--wipe]
    python3 stack/stack.py run -- CMD    # up, run CMD, stop only what this call started

With --secure (state in .stack-secure/, other ports) the same two clusters authenticate and
authorize every client: a SASL_SSL listener (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN users), an SSL
listener that requires a client certificate, KRaft's StandardAuthorizer with ACLs, and Connect
workers whose REST API is HTTPS with basic authentication. The CA, certificates (openssl) and
random passwords are made at the first start, owner-only, under .stack-secure/secure/; the
`migrator` user may only Describe and Read on the source and may write the target. Creating the
ACLs needs the project's virtualenv (confluent-kafka): `make stack-up SECURE=1` runs it there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from stack_common import StackError
from stack_install import (KAFKA_VERSION, SOURCE_VERSIONS, TARGET_VERSIONS, check_java, ensure_basic_auth_extension, install,
                           installed_marker, kafka_home)
from stack_profiles import (DEFAULT_CLUSTERS, DEFAULT_STATE_DIR, MULTI_STATE_DIR, SECURE_CLUSTERS,
                            SECURE_STATE_DIR, Cluster, compat_clusters, compat_state_dir, multi_clusters, parse_cluster)
from stack_security import owner_only_dir, prepare_security, provision_acls
from stack_services import Service, services, stop, stop_all, wait_until_answering
from stack_settings import launch


def up(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float, secure: bool = False) -> list[Service]:
    """Start every service that is not running and wait until all answer; returns those it started.
    `secure`: the secure profile (see the module's doc), its ACLs created once the brokers answer."""
    for version in sorted({c.version for c in clusters}):
        if not installed_marker(kafka_home(version)).exists():
            install(kafka_home(version), version)
    java = check_java()
    security = None
    if secure:
        ensure_basic_auth_extension()
        security = prepare_security(owner_only_dir(state_dir))
    all_services = services(clusters, state_dir, security)
    started: list[Service] = []
    launched: dict[str, subprocess.Popen] = {}
    try:
        for kind in ("zookeeper", "kafka", "connect"):
            group = [s for s in all_services if s.kind == kind]
            to_wait = []
            for service in group:
                pid = service.pid()
                if pid is not None:
                    print(f"stack: {service.name} already running (pid {pid})", flush=True)
                    if not service.answers():
                        to_wait.append(service)
                    continue
                launched[service.name] = launch(java, service)
                started.append(service)
                to_wait.append(service)
                print(f"stack: started {service.name} (pid {launched[service.name].pid}), "
                      f"waiting for localhost:{service.port} ...", flush=True)
            wait_until_answering(to_wait, launched, timeout_s)
            if kind == "kafka" and security:
                provision_acls(clusters, security)
    except BaseException:
        for service in reversed(started):
            stop(service, pid=launched[service.name].pid)
        raise
    scheme = "https" if secure else "http"
    print(f"stack: up ({', '.join(f'{c.name}: kafka {c.bootstrap}, connect {scheme}://localhost:{c.connect_port}' for c in clusters)})"
          + (f"; credentials under {security.dir}" if security else ""))
    return started


def run_with_stack(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float, command: list[str],
                   secure: bool = False) -> int:
    """Bring the stack up, run `command`, then stop only the services this call started."""
    if not command:
        raise StackError("run needs a command after --, e.g. stack.py run -- pytest")
    started_at = time.monotonic()
    started = up(clusters, state_dir, timeout_s, secure)
    print(f"stack: ready after {time.monotonic() - started_at:.1f}s; running {' '.join(command)}", flush=True)
    try:
        return subprocess.call(command)
    finally:
        for service in stop_all(started):
            print(f"stack: stopped {service.name}", flush=True)


def down(clusters: tuple[Cluster, ...], state_dir: Path, wipe: bool) -> None:
    for service in stop_all(services(clusters, state_dir)):  # workers before their brokers
        print(f"stack: stopped {service.name}", flush=True)
    if wipe:
        for service in services(clusters, state_dir):
            shutil.rmtree(service.dir, ignore_errors=True)
        shutil.rmtree(state_dir / "secure", ignore_errors=True)  # the secure profile's certificates and passwords
        print(f"stack: wiped data under {state_dir}")


def status(clusters: tuple[Cluster, ...], state_dir: Path, secure: bool = False) -> bool:
    report = {}
    security = prepare_security(state_dir) if secure and (state_dir / "secure").exists() else None
    for service in services(clusters, state_dir, security):
        report[service.name] = {"pid": service.pid(), "port": service.port, "answers": service.answers()}
    print(json.dumps(report, indent=2))
    return all(v["answers"] for v in report.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="stack.py {install,up,down,status,run} [options] [-- COMMAND ...]")
    parser.add_argument("command", choices=["install", "up", "down", "status", "run"])
    parser.add_argument("--secure", action="store_true",
                        help="the secure profile: SASL_SSL, mutual TLS, ACLs, HTTPS Connect with basic auth "
                             "(default state dir .stack-secure/, ports 19192-19194/18183 and 29192-29194/28183)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where configs, data, logs and pid files live (default: .stack/, or $KMIGRATE_STACK_DIR)")
    parser.add_argument("--cluster", type=parse_cluster, action="append", dest="clusters",
                        help="NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT; repeatable (default: source and target)")
    parser.add_argument("--brokers", type=int, default=1,
                        help="brokers per cluster; N >= 2 is the multi-broker profile: replication factor 3, "
                             "min.insync.replicas 2 (default state dir .stack-multi/, ports 19292, 19302, ... and 29292, "
                             "29302, ..., Connect 18283 and 28283)")
    parser.add_argument("--source-version", choices=SOURCE_VERSIONS, default=None,
                        help="the compat profile: the source as this Kafka version (with ZooKeeper before 4.0, and a "
                             f"Connect worker of that version), the target {KAFKA_VERSION} on KRaft (default state dir "
                             ".stack-compat-VERSION/, ports 19392-19393/18383 and 29392-29393/28383)")
    parser.add_argument("--target-version", choices=TARGET_VERSIONS, default=None,
                        help=f"the compat profile's target as this Kafka version (default {KAFKA_VERSION}; state dir "
                             ".stack-compat-SOURCE-to-TARGET/); alone, the source is {KAFKA_VERSION} too")
    parser.add_argument("--wipe", action="store_true", help="with down: delete data and logs too")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each group of services")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    secure = args.secure or os.environ.get("KMIGRATE_STACK_SECURE", "") == "1"
    multi = args.brokers > 1
    compat = args.source_version is not None or args.target_version is not None
    source_version, target_version = args.source_version or KAFKA_VERSION, args.target_version or KAFKA_VERSION
    clusters = tuple(args.clusters or (SECURE_CLUSTERS if secure else multi_clusters(args.brokers) if multi
                                       else compat_clusters(source_version, target_version) if compat else DEFAULT_CLUSTERS))
    if args.clusters and multi:
        clusters = tuple(dataclasses.replace(c, brokers=args.brokers) for c in clusters)
    default_dir = os.environ.get("KMIGRATE_SECURE_STACK_DIR", SECURE_STATE_DIR) if secure else \
        os.environ.get("KMIGRATE_MULTI_STACK_DIR", MULTI_STATE_DIR) if multi else \
        compat_state_dir(source_version, target_version) if compat else \
        os.environ.get("KMIGRATE_STACK_DIR", DEFAULT_STATE_DIR)
    state_dir = Path(args.state_dir or default_dir).resolve()
    try:
        if sum((secure, multi, compat)) > 1:
            raise StackError("--secure, --brokers N and --source-version are separate profiles for now: start one "
                             "of them")
        if not 1 <= args.brokers <= 5:
            raise StackError(f"--brokers {args.brokers}: use 1 to 5 (each broker takes 1 GB of heap)")
        if args.command == "install":
            for version in sorted({c.version for c in clusters}):
                print(f"stack: Kafka {version} jars in {install(kafka_home(version), version)}")
        elif args.command == "up":
            up(clusters, state_dir, args.timeout, secure)
        elif args.command == "run":
            return run_with_stack(clusters, state_dir, args.timeout, command, secure)
        elif args.command == "down":
            down(clusters, state_dir, args.wipe)
        else:
            return 0 if status(clusters, state_dir, secure) else 1
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
