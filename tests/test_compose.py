"""docker-compose.yaml describes the same stack as stack/stack.py: versions, ports and settings.
No Docker engine runs here, so this is the check that keeps the file honest."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.support.stack import PROJECT_DIR, load_spark_cluster_module, load_stack_module

stack = load_stack_module()
COMPOSE = yaml.safe_load((PROJECT_DIR / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def pinned(package: str) -> str:
    text = (PROJECT_DIR / "requirements.txt").read_text()
    match = re.search(rf"^{re.escape(package)}==(\S+)$", text, re.M)
    assert match, f"{package} is not pinned in requirements.txt"
    return match.group(1)


def host_ports(service: str) -> set[int]:
    """The host ports a service publishes ("[IP:]HOST:CONTAINER")."""
    return {int(str(p).split(":")[-2]) for p in SERVICES[service].get("ports", [])}


def published(service: dict) -> list[str]:
    """A service's published ports as strings, in either compose syntax (short, or long with host_ip)."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append(f"{port.get('host_ip', '')}:{port.get('published', '')}:{port.get('target')}")
        else:
            out.append(str(port))
    return out


def properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def test_services_are_the_stack_plus_airflow_and_spark():
    expected = {
        "source-kafka", "target-kafka", "source-connect", "target-connect",
        "postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "airflow-triggerer", "spark-master", "spark-worker", "spark-connect", "kmigrate-exporter", "prometheus",
    }
    assert set(SERVICES) == expected


def test_prometheus_is_the_pinned_release_scraping_the_exporter_with_the_alert_rules():
    version = re.search(r'^PROMETHEUS_VERSION = "([^"]+)"', (PROJECT_DIR / "stack" / "prometheus_install.py").read_text(),
                        re.M).group(1)
    assert SERVICES["prometheus"]["image"] == f"prom/prometheus:v{version}"
    config = yaml.safe_load((PROJECT_DIR / "monitoring" / "prometheus-compose.yml").read_text())
    assert config["rule_files"] == ["/etc/kmigrate-monitoring/alerts.yml"]
    assert "./monitoring:/etc/kmigrate-monitoring:ro" in SERVICES["prometheus"]["volumes"]
    [target] = config["scrape_configs"][0]["static_configs"][0]["targets"]
    exporter = SERVICES["kmigrate-exporter"]["command"]
    assert target == f"kmigrate-exporter:{exporter[exporter.index('--port') + 1]}"
    assert "/opt/airflow/kmigrate-state" in exporter


def test_kafka_images_are_the_pinned_version():
    for name in ("source-kafka", "target-kafka", "source-connect", "target-connect"):
        assert SERVICES[name]["image"] == f"apache/kafka:{stack.KAFKA_VERSION}", name


def test_host_ports_match_the_local_stack():
    for cluster in stack.DEFAULT_CLUSTERS:
        assert cluster.kafka_port in host_ports(f"{cluster.name}-kafka")
        assert cluster.connect_port in host_ports(f"{cluster.name}-connect")


def test_broker_settings_match_the_local_stack():
    for cluster in stack.DEFAULT_CLUSTERS:
        env = SERVICES[f"{cluster.name}-kafka"]["environment"]
        assert env["KAFKA_HEAP_OPTS"] == stack.BROKER_HEAP
        for key, value in stack.BROKER_SETTINGS.items():
            env_key = "KAFKA_" + key.upper().replace(".", "_")
            if key == "listener.security.protocol.map":
                # compose adds a HOST listener for clients outside the compose network
                assert set(value.split(",")) <= set(env[env_key].split(",")), key
            else:
                assert env[env_key] == value, key
        assert f"HOST://localhost:{cluster.kafka_port}" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{cluster.name}-kafka:9093"


def test_connect_settings_match_the_local_stack():
    for cluster in stack.DEFAULT_CLUSTERS:
        service = SERVICES[f"{cluster.name}-connect"]
        assert service["environment"]["KAFKA_HEAP_OPTS"] == stack.CONNECT_HEAP
        mount = next(v for v in service["volumes"] if v.endswith(":/opt/kmigrate/connect.properties:ro"))
        props = properties(PROJECT_DIR / mount.split(":")[0])
        for key, value in stack.CONNECT_SETTINGS.items():
            assert props[key] == value, (cluster.name, key)
        assert props["bootstrap.servers"] == f"{cluster.name}-kafka:9092"
        assert props["group.id"] == f"kmigrate-{cluster.name}-connect"
        assert props["plugin.path"].endswith(f"connect-file-{stack.KAFKA_VERSION}.jar")


def test_airflow_and_spark_run_the_pinned_versions():
    dockerfile = (PROJECT_DIR / "stack" / "compose" / "Dockerfile").read_text()
    assert "FROM python:3.11-" in dockerfile
    assert "pip install --no-cache-dir -r requirements.txt -c constraints.txt" in dockerfile
    assert pinned("apache-airflow").startswith("3.3.")
    assert pinned("pyspark").startswith("4.3.")
    commands = {name: SERVICES[name]["command"] for name in SERVICES if name.startswith(("airflow-", "spark-"))}
    assert commands["airflow-apiserver"] == ["airflow", "api-server"]
    assert commands["airflow-scheduler"] == ["airflow", "scheduler"]
    assert commands["airflow-dag-processor"] == ["airflow", "dag-processor"]
    assert commands["airflow-triggerer"] == ["airflow", "triggerer"]
    assert commands["spark-master"][:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert commands["spark-worker"][:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    for name in commands:
        assert SERVICES[name]["image"] == "kmigrate:0.1.0", name  # one project image: same pins everywhere
    env = SERVICES["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/kmigrate/dags"
    assert ".:/opt/kmigrate" in SERVICES["airflow-scheduler"]["volumes"]


def test_the_spark_connect_server_has_the_settings_of_make_spark_connect_up():
    module = load_spark_cluster_module()
    local = module.connect_service(Path("/nowhere"), "local[4,4]", module.CONNECT_PORT, module.CONNECT_UI_PORT,
                                   Path("python"))
    command = SERVICES["spark-connect"]["command"]
    assert command[:3] == ["spark-submit", "--class", module.CONNECT_SERVER] and command[-1] == "spark-internal"
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    for key in ("spark.python.daemon.module", "spark.log.level", "spark.driver.extraJavaOptions"):
        assert conf[key] == local.conf[key], key
    assert conf["spark.connect.grpc.binding.port"] == str(module.CONNECT_PORT)
    assert host_ports("spark-connect") == {module.CONNECT_PORT}


def test_every_published_port_is_bound_to_the_loopback_interface():
    """PLAINTEXT Kafka, Connect's REST API, Airflow (every user an admin) and Spark Connect take
    anyone who reaches them: published on 127.0.0.1 only (the file says how to open one)."""
    ports = {name: published(service) for name, service in SERVICES.items()}
    assert sum(len(p) for p in ports.values()) >= 8  # Kafka x2, Connect x2, Airflow, Spark master x2, Spark Connect
    for name, service_ports in ports.items():
        for port in service_ports:
            assert port.startswith("127.0.0.1:") and port.count(":") == 2, (name, port)
    # no service lets Docker pick a host port on every interface either
    assert not [name for name, service in SERVICES.items() if service.get("network_mode") == "host"]
