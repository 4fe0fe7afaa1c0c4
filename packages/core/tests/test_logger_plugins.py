"""Log destinations as plugins: the entry-point group ``cadence.loggers``, resolved like ``cadence.algorithms``."""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from pathlib import Path

import pytest

import cadence.loggers
from cadence.registry import RegistryError
from cadence.testing import write_plugin_distribution

CORE_SRC = Path(cadence.__file__).parent

PLUGIN = """
    from cadence.loggers import LoggerDestination

    class ShoutLogger(LoggerDestination):
        pass

    class NotALogger:
        pass
"""


_distribution = functools.partial(write_plugin_distribution, group="cadence.loggers")


def test_an_installed_logger_plugin_resolves_through_the_group(plugin_path: Path) -> None:
    _distribution(
        plugin_path, "cadence-test-shout", "ShoutLogger = cadence_test_shout:ShoutLogger", "cadence_test_shout", PLUGIN
    )
    importlib.invalidate_caches()
    from cadence.loggers import ShoutLogger  # the form Composer users write

    assert ShoutLogger is importlib.import_module("cadence_test_shout").ShoutLogger
    assert cadence.loggers.ShoutLogger is ShoutLogger
    assert "ShoutLogger" in dir(cadence.loggers)


def test_an_unknown_name_teaches(plugin_path: Path) -> None:
    with pytest.raises(AttributeError, match=r"no attribute 'InMemoryLoger'; did you mean 'InMemoryLogger'\?") as info:
        _ = cadence.loggers.InMemoryLoger
    assert "entry-point group 'cadence.loggers'" in str(info.value)
    assert not hasattr(cadence.loggers, "NoSuchLogger")
    with pytest.raises(ImportError, match=r"module 'cadence\.loggers' has no attribute 'NoSuchLogger'"):
        from cadence.loggers import NoSuchLogger  # noqa: F401


def test_a_known_plugin_that_is_not_installed_names_its_package(monkeypatch) -> None:
    monkeypatch.setattr(cadence.loggers, "ENTRY_POINT_GROUP", "cadence.test_no_loggers")  # a group nobody fills
    with pytest.raises(ImportError, match="MLFlowLogger lives in the package cadence-mlflow, which is not installed"):
        from cadence.loggers import MLFlowLogger  # noqa: F401
    with pytest.raises(AttributeError, match="pip install cadence-mlflow"):
        _ = cadence.loggers.MLFlowLogger


def test_a_broken_or_wrong_plugin_is_reported_with_its_package_and_reason(plugin_path: Path) -> None:
    _distribution(
        plugin_path,
        "cadence-broken",
        "BrokenLogger = broken_logger:BrokenLogger",
        "broken_logger",
        "raise ImportError('needs libfoo')\n",
    )
    _distribution(
        plugin_path / "b",
        "cadence-test-wrong",
        "WrongLogger = cadence_test_wrong:NotALogger",
        "cadence_test_wrong",
        PLUGIN,
    )
    sys.path.insert(0, str(plugin_path / "b"))
    try:
        importlib.invalidate_caches()
        with pytest.raises(ImportError, match=r"registered by cadence-broken .* ImportError: needs libfoo"):
            _ = cadence.loggers.BrokenLogger
        with pytest.raises(ImportError, match=r"NotALogger is not a cadence\.LoggerDestination subclass"):
            _ = cadence.loggers.WrongLogger
    finally:
        sys.path.remove(str(plugin_path / "b"))


def test_a_logger_name_claimed_twice_is_an_error(plugin_path: Path) -> None:
    _distribution(plugin_path / "a", "cadence-test-one", "ShoutLogger = cadence_test_one:ShoutLogger")
    _distribution(plugin_path / "b", "cadence-test-two", "ShoutLogger = cadence_test_two:ShoutLogger")
    sys.path[:0] = [str(plugin_path / "a"), str(plugin_path / "b")]
    try:
        importlib.invalidate_caches()
        with pytest.raises(RegistryError, match="logger name 'ShoutLogger' is registered twice"):
            _ = cadence.loggers.ShoutLogger
    finally:
        sys.path.remove(str(plugin_path / "a"))
        sys.path.remove(str(plugin_path / "b"))


def test_the_core_never_imports_cadence_mlflow() -> None:
    """Not at the top, not in a function, not by a string handed to an import function: only its entry point."""
    found = []
    for path in sorted(CORE_SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and "import" in ast.unparse(node.func):
                names = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            found += [
                f"{path.relative_to(CORE_SRC)}:{node.lineno} {n}" for n in names if n.startswith("cadence_mlflow")
            ]
    assert not found, f"the core imports the MLflow plugin: {found}"
