"""The layout rules of design.md, checked on the source so they cannot drift."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the harness depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
METHODS = sorted(p for p in (ROOT / "packages" / "methods").iterdir() if p.is_dir())
IDS = [p.name for p in METHODS]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_method_package_shape(folder: Path) -> None:
    name = folder.name
    source = folder / "src" / f"cadence_{name}"
    for required in ("pyproject.toml", "card.md", "tests"):
        assert (folder / required).exists(), f"{name}: missing {required}"
    for module in ("__init__.py", "functional.py", "algorithm.py"):
        assert (source / module).exists(), f"{name}: missing src/cadence_{name}/{module}"
    meta = tomllib.loads((folder / "pyproject.toml").read_text())
    assert meta["project"]["name"] == f"cadence-{name.replace('_', '-')}"
    assert meta["project"]["readme"] == "card.md"
    entry_points = meta["project"]["entry-points"]["cadence.methods"]
    assert list(entry_points) == [name] and entry_points[name].startswith(f"cadence_{name}:")


@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_functional_imports_torch_only(folder: Path) -> None:
    functional = folder / "src" / f"cadence_{folder.name}" / "functional.py"
    allowed_roots = {"torch", "cadence"} | set(sys.stdlib_module_names)
    forbidden = {"cadence.trainer", "cadence.engine", "cadence.state", "cadence.algorithm", "cadence.callback"}
    for name in _imports(functional):
        assert name.split(".")[0] in allowed_roots, f"{functional.relative_to(ROOT)} imports {name}"
        assert name not in forbidden, f"{functional.relative_to(ROOT)} imports the trainer side: {name}"


@pytest.mark.parametrize("folder", METHODS, ids=IDS)
def test_methods_never_import_each_other(folder: Path) -> None:
    own = f"cadence_{folder.name}"
    for path in (folder / "src").rglob("*.py"):
        for name in _imports(path):
            root = name.split(".")[0]
            if root.startswith("cadence_") and root != own:
                pytest.fail(f"{path.relative_to(ROOT)} imports another method package: {name}")


def test_core_never_names_a_method_or_the_harness() -> None:
    method_modules = {f"cadence_{p.name}" for p in METHODS} | {"cadence_harness"}
    for path in (ROOT / "packages" / "core" / "src").rglob("*.py"):
        for name in _imports(path):
            assert name.split(".")[0] not in method_modules, f"{path.relative_to(ROOT)} imports {name}"


def test_core_imports_no_heavy_optional_dependency_at_import_time() -> None:
    import subprocess

    code = (
        "import sys, cadence, cadence.functional, cadence.algorithms, cadence.loggers, cadence.models; "
        "print(sorted(m for m in ('mlflow', 'transformers', 'timm', 'torchvision', 'torchmetrics', 'sklearn') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"import cadence pulled in: {result.stdout.strip()}"
