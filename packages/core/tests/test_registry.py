"""Method discovery through real entry points: lazy access, duplicates, broken plugins."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path

import pytest

import cadence.algorithms as ca
import cadence.functional as cf
from cadence.registry import PluginWarning, RegistryError, build_registry, registry
from cadence.testing import write_plugin_distribution

_distribution = functools.partial(write_plugin_distribution, group="cadence.methods")


PLUGIN = """
    from cadence import Algorithm, Event

    __all__ = ["Shout", "shout_batch"]

    class Shout(Algorithm):
        events = (Event.AFTER_DATALOADER,)
        def match(self, event, state): return True
        def apply(self, event, state, logger): pass

    def shout_batch(x):
        return x * 2
"""


def test_installed_plugins_appear_lazily(plugin_path: Path) -> None:
    _distribution(plugin_path, "cadence-test-shout", "shout = cadence_test_shout:Shout", "cadence_test_shout", PLUGIN)
    importlib.invalidate_caches()
    assert cf.shout_batch(3) == 6
    assert ca.Shout.__name__ == "Shout"
    assert "shout_batch" in dir(cf) and "Shout" in dir(ca)
    info = registry().method("shout")
    assert info.distribution == "cadence-test-shout" and info.algorithm is ca.Shout
    assert registry().method("Shout") is info  # the class name works too
    with pytest.raises(AttributeError, match="no installed cadence method provides it"):
        _ = cf.not_a_method
    with pytest.raises(KeyError, match="no installed method named 'nope'"):
        registry().method("nope")


def test_broken_plugin_is_reported_with_its_name_and_reason(plugin_path: Path) -> None:
    _distribution(plugin_path, "cadence-test-shout", "shout = cadence_test_shout:Shout", "cadence_test_shout", PLUGIN)
    _distribution(
        plugin_path,
        "cadence-broken",
        "broken = broken_plugin:Thing",
        "broken_plugin",
        "raise ImportError('needs libfoo')\n",
    )
    importlib.invalidate_caches()
    with pytest.warns(
        PluginWarning, match="could not load method 'broken' from broken_plugin:Thing: ImportError: needs libfoo"
    ):
        built = build_registry()
    assert "shout" in built.methods and built.broken == {"broken": "ImportError: needs libfoo"}


def test_duplicate_names_are_errors(plugin_path: Path) -> None:
    _distribution(
        plugin_path / "a", "cadence-test-one", "shout = cadence_test_shout:Shout", "cadence_test_shout", PLUGIN
    )
    _distribution(plugin_path / "b", "cadence-test-two", "shout = cadence_test_other:Shout")
    sys.path[:0] = [str(plugin_path / "a"), str(plugin_path / "b")]
    try:
        importlib.invalidate_caches()
        with pytest.raises(RegistryError, match="method name 'shout' is registered twice"):
            build_registry()
    finally:
        sys.path.remove(str(plugin_path / "a"))
        sys.path.remove(str(plugin_path / "b"))


def test_a_public_name_exported_by_two_methods_is_an_error(plugin_path: Path) -> None:
    _distribution(plugin_path, "cadence-test-shout", "shout = cadence_test_shout:Shout", "cadence_test_shout", PLUGIN)
    _distribution(plugin_path, "cadence-test-echo", "echo = cadence_test_echo:Shout", "cadence_test_echo", PLUGIN)
    importlib.invalidate_caches()
    with pytest.raises(RegistryError, match="'Shout' is exported by two methods, 'echo' and 'shout'"):
        build_registry()
