"""Write the skeleton of a new method package: ``make new-method NAME=stochastic_depth``.

    python packages/methods/new_method.py NAME [--root packages/methods]

The package follows packages/methods/README.md: it installs (``make install``), is discovered
through its entry point, and passes the conformance suite with a placeholder that returns its
input unchanged. One test, ``test_the_method_is_implemented``, fails until the placeholder is
replaced by the method, so a scaffold never passes CI unnoticed. Only the standard library.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def class_name(name: str) -> str:
    """``stochastic_depth`` -> ``StochasticDepth``."""
    return "".join(part.capitalize() for part in name.split("_"))


def files(name: str) -> dict[str, str]:
    """Relative path -> content of every file of the package `name`."""
    cls, fn, dist = class_name(name), f"{name}_batch", f"cadence-{name.replace('_', '-')}"
    return {
        "pyproject.toml": f'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{cls}: one line saying what the method does (scaffold: replace it)"
readme = "card.md"
requires-python = ">=3.10"
license = "Apache-2.0"
dependencies = ["cadence>=0.1", "torch>=2.4"]

[project.entry-points."cadence.methods"]
{name} = "cadence_{name}:{cls}"

[tool.setuptools.packages.find]
where = ["src"]
''',
        f"src/cadence_{name}/__init__.py": f'''"""{cls} for cadence: what it does and the paper (scaffold).

`{fn}` is the function for your own training loop; `{cls}` is the method for `cadence.Trainer`.
"""

from cadence_{name}.algorithm import {cls} as {cls}
from cadence_{name}.functional import {fn} as {fn}

__all__ = ["{cls}", "{fn}"]
''',
        f"src/cadence_{name}/functional.py": f'''"""{cls} as pure tensor functions (cite the paper). Torch only."""

from __future__ import annotations

import torch

from cadence.ops.checks import check_number

__all__ = ["check_{name}_args", "{fn}"]


def check_{name}_args(strength: float) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_number("strength", strength, ge=0, le=1, hint="replace with the method's own hyperparameters")


def {fn}(
    input: torch.Tensor, strength: float = 0.5, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """What the method computes, in one sentence, and why it helps.

    Args:
        input: images ``(N, C, H, W)``; any dtype, device and memory format.
        strength: replace with the method's hyperparameters (documented once, here).
        generator: draws every random number (the global RNG when None).

    Returns:
        A new tensor like `input`. The scaffold returns an unchanged copy: implement the method here.
    """
    check_{name}_args(strength)
    return input.clone()
''',
        f"src/cadence_{name}/algorithm.py": f'''"""`{cls}`: the Event adapter over `{fn}`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, Resource, State
from cadence.ops import BatchKey, RandomMethod, check_batch_key, require_tensor
from cadence_{name}.functional import check_{name}_args, {fn}

__all__ = ["{cls}"]


class {cls}(RandomMethod):
    """Applies `{fn}` to every training batch on AFTER_DATALOADER (its generator is set up on INIT).

    Arguments as in `{fn}`; ``input_key`` finds the images in the batch and ``seed`` fixes the
    generator (default: derived from the run's seed).
    """

    events = (Event.INIT, Event.AFTER_DATALOADER)
    order = 0  # say which methods it nests inside and why (see packages/methods/README.md)
    generators = {{"{name}": "device"}}

    def __init__(self, strength: float = 0.5, input_key: BatchKey = 0, *, seed: int | None = None):
        check_{name}_args(strength)
        super().__init__(seed=seed)
        self.strength = strength
        self.input_key = check_batch_key("input_key", input_key)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        if event is Event.INIT:
            return self.setup_generators(state)
        images, generator = state.batch_get_item(self.input_key), self.generator("{name}")
        state.batch_set_item(self.input_key, {fn}(images, self.strength, generator=generator))

    def effects(self) -> Effects:
        return Effects(reads={{Resource.INPUTS}}, writes={{Resource.INPUTS}})

    def check_applicable(self, model: Any, batch: Any) -> None:
        require_tensor(self, batch, self.input_key, "images (N, C, H, W)", key_name="input_key", ndim=4)
''',
        "tests/test_conformance.py": f'''"""{cls} meets the contract every cadence method meets."""

from __future__ import annotations

import torch
from cadence_{name} import {cls}, {fn}

from cadence.testing import MethodConformance


class Test{cls}Conformance(MethodConformance):
    def make_algorithm(self) -> {cls}:
        return {cls}()

    def functional_calls(self):
        return {{"{fn}": lambda x, y: {fn}(x, generator=torch.Generator().manual_seed(0))}}
''',
        "tests/test_functional.py": f'''"""{cls}'s own math, checked against its definition."""

from __future__ import annotations

import pytest
import torch
from cadence_{name} import {fn}


def test_the_method_is_implemented() -> None:
    images = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = {fn}(images, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(out, images), (
        "{fn} is still the scaffold's placeholder (it returns its input): implement it in "
        "src/cadence_{name}/functional.py, then replace this test by tests of the method's math"
    )


@pytest.mark.parametrize("strength", [-0.1, 1.5, float("inf"), True, "0.5"])
def test_bad_hyperparameters_are_refused_naming_the_argument(strength: object) -> None:
    with pytest.raises(ValueError, match="`strength`"):
        {fn}(torch.rand(1, 3, 4, 4), strength=strength)  # type: ignore[arg-type]
''',
        "card.md": f"""---
name: {cls}
method: {name}
tldr: One line saying what the method does and why it can speed training up (scaffold).
paper: "Authors, Title, Venue Year, https://arxiv.org/abs/..."
events: [init, after_dataloader]
order: 0
touches:
  reads: [batch inputs]
  writes: [batch inputs]
exclusive: []
conflicts: []
applicability: "image batches (N, C, H, W) on any device (scaffold: the models, data and batches it fits)"
functional: [{fn}]
claims: []  # what the paper or Composer reports (see method_cards/TEMPLATE.md); report --cards judges them
---

# {cls}

One paragraph: what it does, the intuition, and the trade it makes (scaffold).

## How to use

### Functional

```python
import torch
from cadence_{name} import {fn}

images = torch.rand(8, 3, 16, 16)
out = {fn}(images, strength=0.5, generator=torch.Generator().manual_seed(0))
assert out.shape == images.shape
```

### With the Trainer

```python
import torch
from torch.utils.data import DataLoader
from cadence import Trainer
from cadence.testing import image_dataset, tiny_image_classifier
from cadence_{name} import {cls}

model = tiny_image_classifier()
trainer = Trainer(
    model=model,
    train_dataloader=DataLoader(image_dataset(16), batch_size=8, shuffle=True),
    max_duration="2ba",
    optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
    algorithms=[{cls}(strength=0.5)],
    device="cpu",
    progress_bar=False,
)
trainer.fit()
```

## Implementation notes

Exact behaviour: formulas, which events it uses and why, randomness (its generator, seeded from
`seed=` or the run's seed, checkpointed), batch formats, what differs from Composer's implementation.

## Suggested hyperparameters

Each default and the reason for it.

## When it does not help

Honest limits, with sources.

## Composition

Which methods it composes with, which it conflicts with (and why), ordering notes.

## Attribution

The paper, and the implementations consulted.

## Results

<!-- results:start -->
No measurements yet. `cadence-bench report` writes the harness's measured results here.
<!-- results:end -->
""",
    }


def scaffold(name: str, root: Path) -> Path:
    """Write the package `name` under `root`; refuses a bad name or an existing folder."""
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ValueError(f"NAME={name!r} must be a snake_case identifier, e.g. stochastic_depth")
    folder = root / name
    if folder.exists():
        raise FileExistsError(f"{folder} already exists; choose another NAME")
    for relative, content in files(name).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the method's folder name, snake_case (e.g. stochastic_depth)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    try:
        folder = scaffold(args.name, args.root)
    except (ValueError, FileExistsError) as error:
        print(f"new-method: {error}", file=sys.stderr)
        return 2
    print(f"wrote {folder}: `make install` installs it, `make test` runs its tests;")
    print("follow packages/methods/README.md, and replace the placeholder in functional.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
