#!/usr/bin/env python3
"""Start, stop and inspect the local Kafka stack: `python3 stack/stack.py {install,up,down,status,run}`
(--help tells all). Standard library only, so it runs before the project's virtualenv exists.

The entry point, and the one module the tests load (by path, as `kmigrate_stack`): it hands on the
names of the modules beside it, one concern each:
    stack_common.py    the project's folder, StackError, poll_until (the one wait with a deadline)
    stack_install.py   the pinned Kafka versions and their jars from Maven Central; Java
    stack_profiles.py  the profiles: their clusters, ports, Kafka versions and state folders
    stack_security.py  the secure profile's CA, certificates, passwords, settings and ACLs
    stack_services.py  Service: start, track by pid, poll until it answers, stop
    stack_settings.py  what each service starts with: its settings, files and java command line
    stack_cli.py       the commands (install, up, down, status, run) and their arguments
"""
from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests, bench): find the modules beside it
    sys.path.append(str(Path(__file__).resolve().parent))

# the names the tests and scripts that load this file use, from where they stand
from stack_cli import down, main, run_with_stack, status, up  # noqa: E402, F401
from stack_common import PROJECT_DIR, StackError, poll_until  # noqa: E402, F401
from stack_install import (BASIC_AUTH_EXTENSION, CACHE_DIR, DEPENDENCY_PLUGIN, KAFKA_HOME,  # noqa: E402, F401
                           KAFKA_VERSION, POM, SOURCE_VERSIONS, TARGET_VERSIONS, check_java, ensure_basic_auth_extension,
                           install, installed_marker, java_binary, kafka_home, maven_settings_args, mvn_binary,
                           tools_classpath)
from stack_profiles import (BROKER_PORT_STEP, COMPAT_STATE_DIR, DEFAULT_CLUSTERS, DEFAULT_STATE_DIR,  # noqa: E402, F401
                            MULTI_STATE_DIR, SECURE_CLUSTERS, SECURE_STATE_DIR, Cluster, broker_name, compat_clusters,
                            compat_state_dir, multi_clusters, parse_cluster)
from stack_security import (CLIENT_METHODS, CONNECT_REST_USER, KAFKA_USERS, MIGRATOR,  # noqa: E402, F401
                            SCRAM_MECHANISMS, SUPER_USERS, Security, acl_binding, connect_jaas_file, migrator_acls,
                            prepare_security, provision_acls, secure_broker_settings, secure_connect_settings,
                            write_private)
from stack_services import (PidTracked, Service, connect_answers, kafka_answers, port_open,  # noqa: E402, F401
                            process_is_ours, running_pid, services, start, stop, stop_all, tail, wait_until_answering)
from stack_settings import (BROKER_HEAP, BROKER_SETTINGS, CONNECT_HEAP, CONNECT_SETTINGS, JVM_FLAGS,  # noqa: E402, F401
                            ZK_BROKER_SETTINGS, java_command, launch, multi_broker_settings, new_cluster_id,
                            prepare_connect, prepare_kafka, prepare_zk_kafka, prepare_zookeeper, write_log4j,
                            write_properties)

if __name__ == "__main__":
    sys.exit(main())
