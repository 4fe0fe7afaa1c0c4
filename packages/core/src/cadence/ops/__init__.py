"""`cadence.ops`: what method packages build on. A method imports only from `cadence` and here.

Building blocks (torch only; a method's ``functional.py`` imports them from their module, e.g.
``from cadence.ops.modules import eval_mode
from cadence.ops.mixing import mix_with_permutation``):

* `checks`: argument checks that name the argument (`check_number`, `check_int`, `check_bool`,
  `check_time`, ...).
* `rng` and `sampling`: per-method generators (`MethodRNG`, `derive_seed`) and seedable Gamma,
  Beta and Dirichlet draws on any device.
* `mixing` and `targets`: pairing examples within a batch, dense targets, soft cross-entropy.
* `pixels`, `image_ops`, `augment`, `pil`, `dataset_transforms`: batched image primitives, the
  RandAugment/AugMix operation vocabulary, drawing and applying it per sample, PIL conversion,
  adding a transform to a dataset.
* `surgery`: `replace_modules` (weights, device, dtype, memory format and optimizer state kept;
  idempotent; a `SurgeryReport`; `NoEffectWarning` when nothing matched), `no_effect`, which a
  surgery of its own kind calls to say it changed nothing (a warning, an error with ``strict``),
  and `count_module_instances` (Composer's name) for the counts Composer logs.

The adapter side (``algorithm.py`` imports these from ``cadence.ops``):

* `Method` (runs on its declared events), `RandomMethod` (``seed=``, its own generators,
  checkpointed), `AugmentationMethod`, `LabelMixingMethod`, `SurgeryMethod` (runs once at INIT,
  recorded in checkpoints): base classes that leave a method's adapter a few lines per event.
* `require_tensor`, `read_batch_item`, `describe_batch`: for `Algorithm.check_applicable`.
* `eval_mode` (a scoring pass that leaves every module's train/eval flag as it was).
* Batch access (`BatchKey`, `check_batch_key`, `batch_get_item`, `batch_set_item`, `batch_num_samples`,
  `take_samples`, `batch_to_device`, `split_batch`) and `autocast_context`, re-exported from the core.

See ``packages/methods/README.md`` for how a method package uses them.
"""

from cadence.batch import (
    BatchKey,
    batch_get_item,
    batch_num_samples,
    batch_set_item,
    batch_to_device,
    check_batch_key,
    split_batch,
    take_samples,
)
from cadence.ops.applicability import describe_batch, read_batch_item, require_tensor
from cadence.ops.augment import apply_ops, augment_batch, augment_image, draw_ops, random_uniform
from cadence.ops.augmentation_method import AugmentationMethod
from cadence.ops.checks import (
    ArgumentTypeError,
    check_bool,
    check_callable,
    check_choice,
    check_int,
    check_number,
    check_seed,
    check_time,
    describe,
)
from cadence.ops.dataset_transforms import add_dataset_transform
from cadence.ops.image_ops import OPS, augmentation_sets, op_magnitudes, resolve_augmentation_set
from cadence.ops.label_mixing_method import LabelMixingMethod
from cadence.ops.method import Method, RandomMethod
from cadence.ops.mixing import interpolate_loss, mix_with_permutation, random_permutation
from cadence.ops.modules import eval_mode
from cadence.ops.pil import is_pil_image, map_images, pil_to_tensor, tensor_to_pil, to_pixels
from cadence.ops.rng import MethodRNG, derive_seed
from cadence.ops.sampling import sample_beta, sample_dirichlet, sample_gamma, sample_log_gamma
from cadence.ops.surgery import (
    NoEffectError,
    NoEffectWarning,
    Policy,
    SurgeryReport,
    count_module_instances,
    no_effect,
    policy_for,
    replace_modules,
    unwrap_model,
)
from cadence.ops.surgery_method import SurgeryMethod
from cadence.ops.targets import ensure_targets_one_hot, logits_of, soft_cross_entropy
from cadence.precision import autocast_context

__all__ = [
    "OPS",
    "ArgumentTypeError",
    "AugmentationMethod",
    "BatchKey",
    "LabelMixingMethod",
    "Method",
    "MethodRNG",
    "NoEffectError",
    "NoEffectWarning",
    "Policy",
    "RandomMethod",
    "SurgeryMethod",
    "SurgeryReport",
    "add_dataset_transform",
    "apply_ops",
    "augment_batch",
    "augment_image",
    "augmentation_sets",
    "autocast_context",
    "batch_get_item",
    "batch_num_samples",
    "batch_set_item",
    "batch_to_device",
    "check_batch_key",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_int",
    "check_number",
    "check_seed",
    "check_time",
    "count_module_instances",
    "derive_seed",
    "describe",
    "describe_batch",
    "draw_ops",
    "ensure_targets_one_hot",
    "eval_mode",
    "interpolate_loss",
    "is_pil_image",
    "logits_of",
    "map_images",
    "mix_with_permutation",
    "no_effect",
    "op_magnitudes",
    "pil_to_tensor",
    "policy_for",
    "random_permutation",
    "random_uniform",
    "read_batch_item",
    "replace_modules",
    "require_tensor",
    "resolve_augmentation_set",
    "sample_beta",
    "sample_dirichlet",
    "sample_gamma",
    "sample_log_gamma",
    "soft_cross_entropy",
    "split_batch",
    "take_samples",
    "tensor_to_pil",
    "to_pixels",
    "unwrap_model",
]
