"""Composer's import paths work with ``composer`` replaced by ``cadence`` (issue 14, point 14).

Composer documents ``from composer.algorithms.<name> import <Class>, <function>`` (e.g.
``composer.algorithms.label_smoothing``, ``composer.algorithms.blurpool``), ``from composer.algorithms
import <Class>`` and ``composer.functional.<function>``. Here the same spellings must resolve, for
every installed method, to the installed method package's own objects.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import cadence.algorithms
import cadence.functional
from cadence.registry import registry

INSTALLED = sorted(registry().methods)

# composer/functional/__init__.py: each re-exported function and the algorithm folder it comes from
COMPOSER_FUNCTIONAL = {
    "apply_alibi": "alibi",
    "augmix_image": "augmix",
    "apply_blurpool": "blurpool",
    "apply_channels_last": "channels_last",
    "colout_batch": "colout",
    "cutmix_batch": "cutmix",
    "cutout_batch": "cutout",
    "compute_ema": "ema",
    "apply_factorization": "factorize",
    "apply_gated_linear_units": "gated_linear_units",
    "apply_ghost_batchnorm": "ghost_batchnorm",
    "apply_gradient_clipping": "gradient_clipping",
    "apply_gyro_dropout": "gyro_dropout",
    "apply_low_precision_groupnorm": "low_precision_groupnorm",
    "apply_low_precision_layernorm": "low_precision_layernorm",
    "smooth_labels": "label_smoothing",
    "freeze_layers": "layer_freezing",
    "mixup_batch": "mixup",
    "resize_batch": "progressive_resizing",
    "randaugment_image": "randaugment",
    "should_selective_backprop": "selective_backprop",
    "select_using_loss": "selective_backprop",
    "set_batch_sequence_length": "seq_length_warmup",
    "apply_squeeze_excite": "squeeze_excite",
    "apply_stochastic_depth": "stochastic_depth",
    "apply_weight_standardization": "weight_standardization",
}


def test_some_methods_are_installed() -> None:
    assert INSTALLED, "the tests below need at least one installed method package"


@pytest.mark.parametrize("name", INSTALLED)
def test_composer_module_path_is_the_method_package(name: str) -> None:
    info = registry().methods[name]
    module = importlib.import_module(f"cadence.algorithms.{name}")
    assert module is info.module
    assert getattr(module, info.algorithm.__name__) is info.algorithm
    assert getattr(cadence.algorithms, info.algorithm.__name__) is info.algorithm
    assert getattr(cadence.algorithms, name) is info.module  # Composer's subpackage attribute


def test_from_import_of_the_composer_paths() -> None:
    pytest.importorskip("cadence_mixup")
    pytest.importorskip("cadence_label_smoothing")
    pytest.importorskip("cadence_blurpool")
    from cadence.algorithms.blurpool import BlurPool, apply_blurpool
    from cadence.algorithms.label_smoothing import LabelSmoothing, smooth_labels
    from cadence.algorithms.mixup import MixUp, mixup_batch

    assert MixUp is cadence.algorithms.MixUp and mixup_batch is cadence.functional.mixup_batch
    assert LabelSmoothing is cadence.algorithms.LabelSmoothing and smooth_labels is cadence.functional.smooth_labels
    assert BlurPool is cadence.algorithms.BlurPool and apply_blurpool is cadence.functional.apply_blurpool


def test_submodules_are_the_packages_own_never_a_second_copy() -> None:
    pytest.importorskip("cadence_mixup")
    import cadence_mixup.algorithm

    alias = importlib.import_module("cadence.algorithms.mixup.algorithm")
    assert alias is cadence_mixup.algorithm and alias.MixUp is cadence.algorithms.MixUp


def test_unknown_modules_raise_module_not_found() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"cadence\.algorithms\.no_such_method"):
        importlib.import_module("cadence.algorithms.no_such_method")
    if "mixup" in INSTALLED:
        with pytest.raises(ModuleNotFoundError, match=r"cadence\.algorithms\.mixup\.no_such_module"):
            importlib.import_module("cadence.algorithms.mixup.no_such_module")


def test_all_and_dir_list_the_installed_classes() -> None:
    classes = sorted(info.algorithm.__name__ for info in registry().methods.values())
    assert cadence.algorithms.__all__ == classes
    assert set(classes) <= set(dir(cadence.algorithms))
    namespace: dict[str, object] = {}
    exec("from cadence.algorithms import *", namespace)
    assert {name: namespace[name] for name in classes} == {name: registry().algorithms[name] for name in classes}


def test_the_hook_works_in_a_fresh_interpreter() -> None:
    """The first import in a process goes through the hook (no earlier import of the method package)."""
    if "mixup" not in INSTALLED:
        pytest.skip("cadence-mixup is not installed")
    code = (
        "from cadence.algorithms.mixup import MixUp, mixup_batch\n"
        "import cadence.algorithms, cadence_mixup\n"
        "assert MixUp is cadence.algorithms.MixUp is cadence_mixup.MixUp\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("function", sorted(COMPOSER_FUNCTIONAL))
def test_functional_reexports_composer_names(function: str) -> None:
    method = COMPOSER_FUNCTIONAL[function]
    if method not in INSTALLED:
        pytest.skip(f"cadence-{method} is not installed")
    assert getattr(cadence.functional, function) is getattr(registry().methods[method].module, function)
    assert function in dir(cadence.functional)
