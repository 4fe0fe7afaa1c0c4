"""The layout rules (README.md's layout section, packages/methods/README.md, the harness's two wings), checked on
the source so they cannot drift.

Every import statement counts: at module level, inside functions, and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the harness depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
METHODS = sorted(p for p in (ROOT / "packages" / "methods").iterdir() if p.is_dir())
IDS = [p.name for p in METHODS]
CORE_SRC = ROOT / "packages" / "core" / "src"
#: cadence.ops modules that are building blocks: torch only, importable from a method's functional.py
TORCH_ONLY_OPS = {
    "augment",
    "checks",
    "dataset_transforms",
    "image_ops",
    "mixing",
    "modules",
    "pil",
    "pixels",
    "rng",
    "sampling",
    "schedule_scaling",
    "weight_decay",
    "surgery",
    "targets",
}
#: core modules below everything that building blocks may use besides each other (plain data types)
BUILDING_BLOCK_BASE = {"cadence.time"}
MAX_LINES = 400
MAX_TRAINER_LINES = 550


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, module: str) -> Iterator[str]:
    """Every module name an import statement of `path` mentions (``from a import b`` gives a and a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            yield origin
            yield from (f"{origin}.{alias.name}" for alias in node.names)


def _imports(path: Path) -> set[str]:
    return set(_imported(path, path.stem))


def _graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module of `package` (under `src`) -> the modules of the same package it imports (a name that is not a
    module counts as its module; a package's own parent is not a dependency it chose)."""
    modules = {_module_name(src, p): p for p in (src / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imported(path, name):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def _core_graph() -> dict[str, set[str]]:
    return _graph(CORE_SRC, "cadence")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


# The core -------------------------------------------------------------------------------------
def test_the_core_has_no_import_circle() -> None:
    cycles = _cycles(_core_graph())
    assert not cycles, "import circles in the core (break them with a protocol or a lower module): " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_building_blocks_import_only_torch_and_each_other() -> None:
    graph = _core_graph()
    for name in sorted(TORCH_ONLY_OPS):
        module = f"cadence.ops.{name}"
        others = {
            target
            for target in graph[module]
            if target.removeprefix("cadence.ops.") not in TORCH_ONLY_OPS and target not in BUILDING_BLOCK_BASE
        }
        assert not others, f"{module} is a building block (torch only) but imports {sorted(others)}"
        roots = {imported.split(".")[0] for imported in _imports(CORE_SRC / "cadence" / "ops" / f"{name}.py")}
        foreign = roots - {"torch", "cadence", "PIL"} - set(sys.stdlib_module_names)
        assert not foreign, f"{module} imports {sorted(foreign)}"


def test_only_the_package_and_the_test_kit_import_the_trainer() -> None:
    importers = {name for name, targets in _core_graph().items() if "cadence.trainer" in targets}
    test_kit = {name for name in importers if name == "cadence.testing" or name.startswith("cadence.testing.")}
    below = importers - test_kit - {"cadence"}
    assert not below, f"modules below the trainer import it: {sorted(below)}"


def test_core_never_names_a_method_the_harness_or_mlflow() -> None:
    forbidden = {f"cadence_{p.name}" for p in METHODS} | {"cadence_harness", "cadence_mlflow"}
    for path in CORE_SRC.rglob("*.py"):  # loggers such as MLflow's are plugins (entry-point group cadence.loggers)
        for name in _imports(path):
            assert name.split(".")[0] not in forbidden, f"{path.relative_to(ROOT)} imports {name}"


def test_core_imports_no_heavy_optional_dependency_at_import_time() -> None:
    import subprocess

    code = (
        "import sys, cadence, cadence.functional, cadence.algorithms, cadence.loggers, cadence.models, cadence.ops; "
        "print(sorted(m for m in ('mlflow', 'transformers', 'timm', 'torchvision', 'torchmetrics', 'sklearn') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"import cadence pulled in: {result.stdout.strip()}"


@pytest.mark.parametrize("member", ["packages/mlflow", "harness"])
def test_upper_packages_use_the_core_through_its_public_modules(member: str) -> None:
    """MLflow and the harness sit on the core like any user: no private module (``cadence._x``) or name."""
    for path in (ROOT / member / "src").rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "cadence":
                assert not any(part.startswith("_") for part in parts), f"{path.relative_to(ROOT)} imports {name}"
            if member == "packages/mlflow":
                assert parts[0] != "cadence_harness", f"{path.relative_to(ROOT)} imports the harness: {name}"


def test_no_source_file_is_too_long() -> None:
    sources = [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("packages/methods/*/src/**/*.py")]
    sources += list((ROOT / "harness" / "src").rglob("*.py"))
    too_long = []
    for path in sources:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = MAX_TRAINER_LINES if path == CORE_SRC / "cadence" / "trainer.py" else MAX_LINES
        if lines > limit:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {limit})")
    assert not too_long, "split these into files with one idea each:\n" + "\n".join(too_long)


# Method packages ------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_method_package_shape(folder: Path) -> None:
    name = folder.name
    source = folder / "src" / f"cadence_{name}"
    for required in ("pyproject.toml", "card.md", "tests"):
        assert (folder / required).exists(), f"{name}: missing {required}"
    for module in ("__init__.py", "functional.py", "algorithm.py"):
        assert (source / module).exists(), f"{name}: missing src/cadence_{name}/{module}"
    extra = {p.name for p in source.glob("*.py")} - {"__init__.py", "functional.py", "algorithm.py", "layers.py"}
    assert not extra, f"{name}: a method package holds functional.py, algorithm.py (and layers.py), not {extra}"
    meta = tomllib.loads((folder / "pyproject.toml").read_text())
    assert meta["project"]["name"] == f"cadence-{name.replace('_', '-')}"
    assert meta["project"]["readme"] == "card.md"
    entry_points = meta["project"]["entry-points"]["cadence.methods"]
    assert list(entry_points) == [name] and entry_points[name].startswith(f"cadence_{name}:")


@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_functional_imports_torch_and_building_blocks_only(folder: Path) -> None:
    functional = folder / "src" / f"cadence_{folder.name}" / "functional.py"
    allowed = {"torch", f"cadence_{folder.name}"} | set(sys.stdlib_module_names)
    for name in _imports(functional):
        if name.startswith("cadence.ops."):
            module = name.split(".")[2]
            assert module in TORCH_ONLY_OPS, f"{functional.relative_to(ROOT)} imports {name}, not a building block"
        else:
            root = name.split(".")[0]
            assert root in allowed, f"{functional.relative_to(ROOT)} imports {name}: torch and cadence.ops.<block> only"


@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_methods_use_the_public_api_only(folder: Path) -> None:
    """A method imports ``cadence`` and ``cadence.ops`` (its tests may also use ``cadence.testing``), and
    never another method package."""
    own = f"cadence_{folder.name}"
    public = {"cadence", "cadence.ops", "cadence.testing"}
    for path in [*(folder / "src").rglob("*.py"), *(folder / "tests").rglob("*.py")]:
        in_tests = "tests" in path.relative_to(folder).parts
        for name in _imports(path):
            root = name.split(".")[0]
            if root.startswith("cadence_") and root != own:
                pytest.fail(f"{path.relative_to(ROOT)} imports another method package: {name}")
            if root != "cadence" or name in public or name.startswith("cadence.ops."):
                continue
            if in_tests and name.rpartition(".")[0] in public | {"cadence.engine"}:
                continue  # `from cadence import Trainer` parses as cadence.Trainer; tests may use check_composition
            parent = name.rpartition(".")[0]
            assert parent in public, f"{path.relative_to(ROOT)} imports {name}: use `cadence` or `cadence.ops`"


# Packages and the harness's two wings ----------------------------------------------------------
HARNESS_SRC = ROOT / "harness" / "src"
PACKAGES = [
    (CORE_SRC, "cadence"),
    (ROOT / "packages" / "mlflow" / "src", "cadence_mlflow"),
    (HARNESS_SRC, "cadence_harness"),
]
PACKAGES += [(p / "src", f"cadence_{p.name}") for p in METHODS]
#: the only harness modules that use both wings: the command line and what it composes
ORCHESTRATORS = {f"cadence_harness.{m}" for m in ("__main__", "cli", "demo", "search_grid", "store_report")}
MAX_HARNESS_DEPTH = 8  # imports deep, counted in edges of the longest chain of harness modules


@pytest.mark.parametrize(("src", "package"), PACKAGES, ids=[package for _, package in PACKAGES])
def test_no_package_has_an_import_circle(src: Path, package: str) -> None:
    cycles = _cycles(_graph(src, package))
    assert not cycles, f"import circles in {package}: " + "; ".join(" <-> ".join(cycle) for cycle in cycles)


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ("running", "reading") else ""


def test_the_reading_wing_reads_only_the_run_records() -> None:
    """It imports the records, the core and its own modules: never the running wing, MLflow, a recipe loader,
    a method package or the core's registry of installed methods (not even inside a function, nor by its name as
    a string), so a report reads the same on every machine that has the records."""
    methods = {f"cadence_{p.name}" for p in METHODS}
    for path in (HARNESS_SRC / "cadence_harness" / "reading").rglob("*.py"):
        assert "cadence.registry" not in path.read_text(encoding="utf-8"), (
            f"{path.relative_to(ROOT)} mentions cadence.registry: read what a method declares from the records "
            "(`cadence_harness.records.recorded_declaration`), not from the classes installed here"
        )
        for name in _imports(path):
            root = name.split(".")[0]
            assert root not in methods | {"mlflow", "cadence_mlflow"}, f"{path.relative_to(ROOT)} imports {name}"
            assert not name.startswith("cadence.registry"), f"{path.relative_to(ROOT)} imports {name}"
            if root == "cadence_harness":
                allowed = name == "cadence_harness" or name.startswith(
                    ("cadence_harness.reading", "cadence_harness.records", "cadence_harness.stats")
                )
                assert allowed, f"{path.relative_to(ROOT)} imports {name}: the reading wing reads run records only"


def test_the_records_import_neither_wing_and_only_orchestrators_use_both() -> None:
    """The records and the statistics (which the reports and the benchmarks' paired goals share) stand between
    the wings; a module that uses both wings is one of the command line's."""
    graph = _graph(HARNESS_SRC, "cadence_harness")
    for neutral in ("cadence_harness.records", "cadence_harness.stats"):
        assert not {_wing(t) for t in graph[neutral]} - {""}, graph[neutral]
    both = {name for name, targets in graph.items() if {"running", "reading"} <= {_wing(t) for t in targets}}
    assert both <= ORCHESTRATORS, (
        f"modules that use both wings (only the command line may): {sorted(both - ORCHESTRATORS)}"
    )
    running = {name for name in graph if _wing(name) == "running"}
    assert not {t for name in running for t in graph[name] if _wing(t) == "reading"}, (
        "the running wing imports the reading wing"
    )


def _longest_chain(graph: dict[str, set[str]]) -> list[str]:
    chains: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in chains:
            longest = max((chain(t) for t in graph[node]), key=len, default=[])
            chains[node] = [node, *longest]
        return chains[node]

    return max((chain(node) for node in graph), key=len, default=[])


def test_the_harness_imports_at_most_eight_deep() -> None:
    chain = _longest_chain(_graph(HARNESS_SRC, "cadence_harness"))
    assert len(chain) - 1 <= MAX_HARNESS_DEPTH, f"{len(chain) - 1} imports deep: " + " -> ".join(chain)
    assert _longest_chain({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"c"}}) == ["a", "b", "c"]
