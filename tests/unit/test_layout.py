"""The layout rules a reviewer can check again: the core library imports neither Airflow nor Spark;
no import cycle among the library's modules; each Spark entry point under 60 lines; the
run steps' library (kmigrate.run) in subpackages, no module loose beside them, and the subpackages
importing each other in one direction only; no test module or conftest.py importing another test
module or conftest.py (shared helpers live in tests/support/); no bench script importing another;
the README at most 250 lines. A module's size is no rule: a module
holds one concept, and a large one is a question for review (a cap made code move to fit a number). Each rule is a function of a tree,
and each is also run on a small tree with a violation planted, so that it is seen to fail."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


PROJECT_DIR = Path(__file__).resolve().parents[2]
INCLUDE = PROJECT_DIR / "include"


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


def first_cycle(graph: dict[str, set[str]]) -> list[str]:
    """The first import cycle a walk of `graph` ({name: the names it imports}) meets, as the names
    along it, the first again at the end; [] when there is none."""
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> list[str]:
        state[name] = "open"
        for nxt in sorted(graph[name]):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, [*trail, nxt])):
                return cycle
        state[name] = "done"
        return []

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return []


def test_no_import_cycle_among_the_library_modules():
    known = modules()
    graph = {name: {i if i in known else i.rsplit(".", 1)[0] for i in imports(path)} & set(known) - {name}
             for name, path in known.items()}
    # a package's __init__ importing its own modules is no cycle of concepts; none here does
    assert not (cycle := first_cycle(graph)), "import cycle: " + " -> ".join(cycle)


def too_long(paths, bound: int, root: Path = PROJECT_DIR) -> dict[str, int]:
    """Each of `paths` over `bound` lines, with its count."""
    return {str(path.relative_to(root)): n for path in paths if (n := len(path.read_text().splitlines())) > bound}


SPARK_SCRIPT_LINES = 60


def fat_entry_points(root: Path) -> dict[str, int]:
    """Spark entry points of 60 lines or more: they parse arguments and call the library."""
    return too_long(sorted((root / "spark_jobs").glob("*.py")), SPARK_SCRIPT_LINES - 1, root)


def loose_run_modules(root: Path) -> list[str]:
    """Modules directly in kmigrate/run/ other than its __init__: each belongs to a subpackage."""
    return sorted(p.name for p in (root / "include" / "kmigrate" / "run").glob("*.py") if p.name != "__init__.py")


def run_subpackage_cycle(root: Path) -> list[str]:
    """A cycle among the subpackages of kmigrate.run (checks, cutover, mirror, ...), as their names,
    each importing the next; [] when they import each other in one direction only. An import inside
    a function counts as one at the top: it ties the two subpackages all the same."""
    run = root / "include" / "kmigrate" / "run"
    members: dict[str, list[Path]] = {}
    for path in sorted(run.rglob("*.py")):
        if len(parts := path.relative_to(run).parts) > 1:
            members.setdefault(parts[0], []).append(path)
    graph = {package: {i.split(".")[2] for path in paths for i in imports(path) if i.startswith("kmigrate.run.")}
             & set(members) - {package} for package, paths in members.items()}
    return first_cycle(graph)


def is_test_module(name: str) -> bool:
    """A dotted name of a test module or a conftest.py (tests.dags.test_x, tests.conftest)."""
    last = name.rsplit(".", 1)[-1]
    return name.split(".")[0] == "tests" and (last.startswith("test_") or last == "conftest")


def relative_imports(path: Path) -> set[str]:
    """`from .x import y` and `from . import x` of a module, as tests.x.y / tests.x (only the last parts
    matter to is_test_module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = "tests" + (f".{node.module}" if node.module else "")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_modules_importing_test_modules(root: Path) -> dict[str, list[str]]:
    """Test modules and conftest.py files of tests/ that import a test module or a conftest.py."""
    found = {}
    for path in sorted((root / "tests").rglob("*.py")):
        if path.name.startswith("test_") or path.name == "conftest.py":
            names = sorted({m for i in imports(path) | relative_imports(path) for m in (i, i.rsplit(".", 1)[0])
                            if is_test_module(m)})
            if names:
                found[str(path.relative_to(root))] = names
    return found


test_modules_importing_test_modules.__test__ = False  # a check, not a test


def test_spark_entry_points_are_thin():
    assert not (fat := fat_entry_points(PROJECT_DIR)), fat


def test_the_run_library_is_in_subpackages():
    assert not (loose := loose_run_modules(PROJECT_DIR)), f"modules loose in include/kmigrate/run/: {loose}"


def test_the_run_subpackages_import_each_other_in_one_direction():
    assert not (cycle := run_subpackage_cycle(PROJECT_DIR)), \
        "subpackages of kmigrate.run importing each other: " + " -> ".join(cycle)


def test_no_test_module_imports_another():
    assert not (found := test_modules_importing_test_modules(PROJECT_DIR)), found


def test_each_rule_fails_on_a_planted_violation(tmp_path):
    def plant(relative: str, text: str) -> None:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)

    plant("include/kmigrate/run/preflight/checks.py", "x = 1\n")
    plant("include/kmigrate/run/records/events.py", "x = 1\n")
    plant("include/kmigrate/run/report/markdown.py", "from kmigrate.run.records import events\n")
    plant("spark_jobs/thin.py", "x = 1\n" * 59)
    plant("tests/dags/test_fine.py", "from tests.support.kafka import x\n")
    assert fat_entry_points(tmp_path) == {} and loose_run_modules(tmp_path) == []
    assert test_modules_importing_test_modules(tmp_path) == {}
    assert run_subpackage_cycle(tmp_path) == []

    plant("spark_jobs/fat.py", "x = 1\n" * 60)
    plant("include/kmigrate/run/loose.py", "x = 1\n")
    plant("tests/dags/test_borrows.py", "from tests.integration.test_copier import seed_plain\n")
    plant("tests/dags/conftest.py", "from tests.conftest import PROJECT_DIR\n")
    plant("tests/faults/test_module.py", "from tests.dags import test_fine\n")
    plant("tests/chaos/test_relative.py", "from .conftest import seeds\n")
    plant("include/kmigrate/run/records/events.py", "def finished():\n    from kmigrate.run.report.markdown import x\n")
    assert fat_entry_points(tmp_path) == {"spark_jobs/fat.py": 60}
    assert loose_run_modules(tmp_path) == ["loose.py"]
    assert set(test_modules_importing_test_modules(tmp_path)) == {
        "tests/dags/test_borrows.py", "tests/dags/conftest.py", "tests/faults/test_module.py",
        "tests/chaos/test_relative.py"}
    assert run_subpackage_cycle(tmp_path) == ["records", "report", "records"]


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
