"""The layers point down, read from the code itself (`ast`, every import, function-level ones included).

Packages, lowest first: the core (`mai/`: types, prompts, cascade, the plan, the pipeline, mai.evals,
mai.backends), then storage, the run's steps over the store (`mai/run/`), the Prefect tasks, the dashboards, the
flows, and the command line (`mai.cli`) and the library API (`mai.api`) on top. A package may import only
packages below it; the core imports no Prefect or DuckDB at all; and no module imports itself back through others
(no cycle, however deep). The folders say what lives in them: every module of `flows/` and `tasks/` imports Prefect,
and nothing in `mai/` does.

The top-level folders are installed as subpackages of `mai` (pyproject's package-dir), so the graph is built from
the folders with that same mapping, read from pyproject.toml.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# lowest first; a package may import itself and anything before it
LAYERS = ("core", "storage", "run", "tasks", "dashboards", "flows", "cli")
ALLOWED_BELOW = {"storage": {"core"}, "run": {"core", "storage"}, "tasks": {"core", "storage", "run"},
                 "dashboards": {"core", "storage"}, "flows": {"core", "storage", "run", "tasks", "dashboards"},
                 "cli": {"core", "storage", "run", "tasks", "dashboards", "flows"}}
CORE_FORBIDDEN_LIBRARIES = ("prefect", "duckdb", "vllm")


def package_folders() -> dict[str, Path]:
    """Import name -> folder, as setuptools installs them."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in settings.items()}


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in package_folders().items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if package == "mai" and parts and parts[0] in ("flows", "tasks", "storage", "dashboards", "cli", "api"):
                continue  # never the case (mai/ has no such folders); the mapping wins if it were
            modules[".".join([package, *parts])] = path
    return modules


def layer_of(module: str) -> str:
    for top in ("mai.cli", "mai.api"):  # folders of their own (cli/, api/): the command line and the library API
        if module == top or module.startswith(top + "."):
            return "cli"
    if module == "mai.run" or module.startswith("mai.run."):
        return "run"
    for layer in ("flows", "tasks", "storage", "dashboards"):
        if module == f"mai.{layer}" or module.startswith(f"mai.{layer}."):
            return layer
    return "core"


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a module's syntax tree, parsed once per session: the tests read the files, never change them
    (each test parsing every module took most of this file's time)."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


def imported_names(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module or module.name, line) of every import statement, wherever it stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in nodes(path):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            yield from ((f"{base}.{alias.name}", node.lineno) for alias in node.names)


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (`mai.plan.RunPlan` -> `mai.plan`), or None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}."""
    modules = module_files()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for name, line in imported_names(module, path):
            target = resolve(name, modules) if name.split(".")[0] == "mai" else None
            if target and target != module and not module.startswith(target + "."):
                graph[module].setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start, targets in graph.items():
        if start in index:
            continue
        work = [(start, iter(targets))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    files, wrong = module_files(), []
    for module, targets in graph.items():
        layer = layer_of(module)
        for target, line in targets.items():
            target_layer = layer_of(target)
            if target_layer != layer and target_layer not in ALLOWED_BELOW.get(layer, set()):
                wrong.append(f"{files[module].relative_to(ROOT)}:{line} ({layer}) imports {target} "
                             f"({target_layer})")
    return wrong


def test_the_mapping_is_read_from_pyproject() -> None:
    folders = package_folders()
    assert folders["mai.flows"] == ROOT / "flows" and folders["mai.storage"] == ROOT / "storage"
    graph = import_graph()
    assert "mai.flows.run" in graph and "mai.plan" in graph["mai.run.jobs"], "the graph misses known imports"


def test_layers_import_only_layers_below() -> None:
    assert upward_imports(import_graph()) == []


def test_no_import_cycles_between_modules() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("library", CORE_FORBIDDEN_LIBRARIES)
def test_the_core_imports_no_orchestration_or_database_library(library: str) -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for module, path in module_files().items()
                 if layer_of(module) == "core"
                 for name, line in imported_names(module, path) if name.split(".")[0] == library]
    assert offenders == []


def test_the_checks_catch_a_core_module_importing_the_shell_and_a_cycle() -> None:
    """The checks themselves: an upward import and a two-module loop, added to the real graph, are found."""
    graph = import_graph()
    graph["mai.cascade"] = {**graph["mai.cascade"], "mai.flows.run": 1}
    assert any("mai.flows.run" in line for line in upward_imports(graph))
    graph["mai.types"] = {**graph["mai.types"], "mai.cascade": 1}
    assert any({"mai.cascade", "mai.types"} <= set(cycle) for cycle in cycles(graph))


def modules_asking_what_is_imported(files: dict[str, Path]) -> list[str]:
    """`"prefect" in sys.modules` (or any `in sys.modules` test naming Prefect) outside the one module that finds
    where a flow's Prefect API comes from (flows/prefect_api.py: Prefect reads its settings once per process)."""
    found = []
    for module, path in files.items():
        if module == "mai.flows.prefect_api":
            continue
        for node in nodes(path):
            if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                    and str(node.left.value).startswith("prefect") and "sys.modules" in ast.unparse(node)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_what_a_run_logs_and_publishes_is_passed_in_never_guessed_from_sys_modules() -> None:
    assert modules_asking_what_is_imported(module_files()) == []


def imports_prefect(path: Path) -> bool:
    return any(name.split(".")[0] == "prefect" for name, _ in imported_names("", path))


def test_every_module_of_flows_and_tasks_imports_prefect_and_none_of_mai_does() -> None:
    """`flows/` holds Prefect flows, `tasks/` Prefect tasks; whatever imports no Prefect lives in `mai/` (or
    storage/, dashboards/), and nothing in `mai/` imports Prefect (its library API reaches flows lazily)."""
    files = module_files()
    shell = [m for m, path in files.items() if layer_of(m) in ("flows", "tasks") and path.name != "__init__.py"
             and not imports_prefect(path)]
    core = [m for m, path in files.items() if m.split(".")[1:2] not in (["flows"], ["tasks"], ["storage"],
                                                                        ["dashboards"]) and imports_prefect(path)]
    assert shell == [] and core == [], (shell, core)


def test_no_module_of_the_core_folder_imports_the_shell() -> None:
    """By folder, with no exemption: nothing in `mai/` imports from `flows/`, `tasks/`, the command line or the
    library API (which live in folders of their own above it)."""
    files, graph = module_files(), import_graph()
    core = ROOT / "mai"
    shell = ("mai.flows", "mai.tasks", "mai.cli", "mai.api")
    offenders = [f"{files[module].relative_to(ROOT)} imports {target}" for module, targets in graph.items()
                 if files[module].is_relative_to(core)
                 for target in targets if target in shell or target.startswith(tuple(p + "." for p in shell))]
    assert offenders == []


def test_provenance_and_the_backends_do_not_import_each_other() -> None:
    """Provenance reads the backends' model facts; the backends time their calls with the host's load (mai.host),
    never with provenance: one direction only."""
    graph = import_graph()
    backends = [m for m in graph if m.startswith("mai.backends.")]
    both = {m for m in backends if "mai.provenance" in graph[m]}, \
        {t for t in graph["mai.provenance"] if t.startswith("mai.backends.")}
    assert not (both[0] and both[1]), both


def test_the_code_version_digests_every_folder_of_the_package() -> None:
    """A host's code is compared by a digest of every folder installed as part of `mai` (mai/code_version.py): a
    folder added to pyproject's mapping and missing there would let a host with other code in it take shards."""
    from mai.code_version import _PACKAGES

    assert set(_PACKAGES) == set(package_folders())
