"""stack/stack.py as a user runs it: idempotent `up`, `down` that leaves nothing behind, and one
clear line for each setup problem. Runs its own one-cluster stack on ports no other test uses."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import PROJECT_DIR, load_stack_module

STACK = [sys.executable, str(PROJECT_DIR / "stack" / "stack.py")]
CLUSTER = "life:30192:30193:30183"  # test ports stay below the ephemeral range (32768-60999): a client socket took 39192 once


def run_stack(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*STACK, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("stack: error: ")
    return lines[0]


@pytest.fixture
def life_stack(tmp_path):
    state = tmp_path / "stack"
    args = ("--state-dir", str(state), "--cluster", CLUSTER)
    yield args
    run_stack("down", *args)  # whatever the test left running


def test_up_twice_is_a_noop_and_down_leaves_no_process(life_stack):
    first = run_stack("up", *life_stack)
    assert first.returncode == 0, first.stderr
    assert "started life-kafka" in first.stdout and "started life-connect" in first.stdout

    status = run_stack("status", *life_stack)
    assert status.returncode == 0
    pids = {name: entry["pid"] for name, entry in json.loads(status.stdout).items()}
    assert all(pids.values()) and all(alive(pid) for pid in pids.values())

    second = run_stack("up", *life_stack)
    assert second.returncode == 0, second.stderr
    assert "started" not in second.stdout
    assert second.stdout.count("already running") == 2
    again = {name: entry["pid"] for name, entry in json.loads(run_stack("status", *life_stack).stdout).items()}
    assert again == pids

    down = run_stack("down", *life_stack)
    assert down.returncode == 0
    assert not [pid for pid in pids.values() if alive(pid)]
    stack_mod = load_stack_module()
    assert not stack_mod.port_open(30192) and not stack_mod.port_open(30183)
    # data is kept by default: a second `up` finds the formatted log dir and starts again
    assert (Path(life_stack[1]) / "life-kafka" / "data" / "meta.properties").exists()


def test_port_taken_is_one_clear_line(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 30292))
        squatter.listen()
        result = run_stack("up", "--state-dir", str(tmp_path), "--cluster", "busy:30292:30293:30283")
    line = one_error_line(result)
    assert "port 30292 is already taken" in line


def test_missing_java_is_one_clear_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it: no java, no mvn
    result = subprocess.run([*STACK, "up", "--state-dir", str(tmp_path), "--cluster", "nojava:30392:30393:30383"],
                            capture_output=True, text=True, timeout=60, env=env)
    line = one_error_line(result)
    assert "java not found" in line and "JAVA_HOME" in line


def test_unreachable_maven_central_is_one_clear_line(tmp_path):
    # An empty cache forces a download; the mirror setting points at a closed local port.
    result = run_stack("install", env={"KMIGRATE_CACHE_DIR": str(tmp_path / "cache"),
                                       "KMIGRATE_MAVEN_MIRROR": "http://127.0.0.1:9/"}, timeout=120)
    line = one_error_line(result)
    assert "Maven Central is unreachable" in line and "KMIGRATE_MAVEN_MIRROR" in line
    assert not (tmp_path / "cache" / "kafka-4.3.1").exists()  # nothing half-installed
