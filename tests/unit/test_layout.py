"""The layout rules a reviewer can check again: the core library imports neither Airflow nor Spark,
no import cycle among the library's modules, no module of include/, plugins/, stack/ or bench/ over
400 lines, no bench script importing another, and the README at most 250 lines."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]
INCLUDE = PROJECT_DIR / "include"
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Every module under include/, by its dotted name."""
    out = {}
    for path in sorted(INCLUDE.rglob("*.py")):
        parts = path.relative_to(INCLUDE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_core_library_imports_neither_airflow_nor_spark():
    for name, path in modules().items():
        if name.startswith("kmigrate."):
            bad = sorted(i for i in imports(path) if i.split(".")[0] in ("airflow", "pyspark", "kmigrate_spark",
                                                                         "kmigrate_airflow"))
            assert not bad, f"{path.relative_to(PROJECT_DIR)} imports {bad}"
    # and at run time: importing every core module loads no Airflow and no Spark
    core = [name for name in modules() if name == "kmigrate" or name.startswith("kmigrate.")]
    script = "import sys\n" + "".join(f"import {name}\n" for name in core) + \
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pyspark', 'py4j'}))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_no_import_cycle_among_the_library_modules():
    known = modules()
    graph = {name: {i if i in known else i.rsplit(".", 1)[0] for i in imports(path)} & set(known) - {name}
             for name, path in known.items()}
    # a package's __init__ importing its own modules is no cycle of concepts; none here does
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for nxt in sorted(graph[name]):
            if state.get(nxt) == "open":
                cycle = trail[trail.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def too_long(paths, bound: int = MAX_LINES) -> dict[str, int]:
    """Each of `paths` over `bound` lines, with its count."""
    return {str(path.relative_to(PROJECT_DIR)): n for path in paths if (n := len(path.read_text().splitlines())) > bound}


@pytest.mark.parametrize("folder", ["include", "plugins", "stack", "bench"])
def test_no_module_is_over_400_lines(folder):
    assert not (long := too_long(sorted((PROJECT_DIR / folder).rglob("*.py")))), long


def test_the_readme_is_at_most_250_lines():
    """The README is for users; docs/ carries the rest."""
    assert not (long := too_long([PROJECT_DIR / "README.md"], 250)), long


def test_bench_scripts_share_code_only_through_the_shared_modules():
    """bench/: no module imports a script (bench_*.py, each run by a make target): what two scripts
    use stands in the shared modules (common.py, mm2.py, ours.py)."""
    bench = {path.stem: path for path in sorted((PROJECT_DIR / "bench").glob("*.py"))}
    scripts = {name for name in bench if name.startswith("bench_")}
    crossing = {str(path.relative_to(PROJECT_DIR)): sorted(found) for name, path in bench.items()
                if (found := {i.split(".")[0] for i in imports(path)} & scripts - {name})}
    assert not crossing, f"bench modules importing a script: {crossing}"
