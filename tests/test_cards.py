"""Method cards: front matter agrees with the code, sections are complete, code blocks run."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import yaml

from cadence.algorithm import Resource
from cadence.registry import registry

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    "## How to use",
    "### Functional",
    "### With the Trainer",
    "## Implementation notes",
    "## Suggested hyperparameters",
    "## When it does not help",
    "## Composition",
    "## Attribution",
    "## Results",
]
KEYS = {
    "name",
    "method",
    "tldr",
    "paper",
    "events",
    "order",
    "touches",
    "exclusive",
    "conflicts",
    "applicability",
    "functional",
}
RESULTS = re.compile(r"<!-- results:start -->.*<!-- results:end -->", re.S)


def _card_paths() -> list[Path]:
    return sorted((ROOT / "packages" / "methods").glob("*/card.md"))


def _split(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert match, f"{path}: a card starts with YAML front matter between '---' lines"
    return yaml.safe_load(match.group(1)), match.group(2)


def _python_blocks(body: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", body, re.S)


CARDS = _card_paths()
IDS = [p.parent.name for p in CARDS]


def test_every_method_package_has_a_card() -> None:
    for folder in sorted((ROOT / "packages" / "methods").iterdir()):
        if folder.is_dir():
            assert (folder / "card.md").exists(), f"{folder.name} has no card.md"


@pytest.mark.parametrize("path", CARDS, ids=IDS)
def test_front_matter_matches_the_algorithm(path: Path) -> None:
    meta, _ = _split(path)
    assert set(meta) >= KEYS, f"{path}: missing front-matter keys {sorted(KEYS - set(meta))}"
    assert meta["method"] == path.parent.name
    info = registry().method(meta["method"])
    algorithm = info.algorithm
    assert meta["name"] == algorithm.__name__
    assert meta["events"] == [e.value for e in algorithm.events], "card events differ from the class's `events`"
    assert meta["order"] == algorithm.order, "card order differs from the class's `order`"
    known = {r.value for r in Resource}
    for key in ("reads", "writes"):
        assert set(meta["touches"][key]) <= known, f"unknown resources in touches.{key}"
    try:
        effects = algorithm().effects()  # the defaults' effects: the card lists everything the method may touch
    except TypeError:  # required arguments
        effects = None
    if effects is not None:
        listed = {"reads": set(meta["touches"]["reads"]), "writes": {*meta["touches"]["writes"], *meta["exclusive"]}}
        for key, names in listed.items():  # what a method owns alone it also writes
            missing = {r.value for r in getattr(effects, key)} - names
            assert not missing, f"{path.parent.name}: effects().{key} has {sorted(missing)}, touches.{key} does not"
    for name in meta["functional"]:
        assert hasattr(info.module, name), f"card lists functional {name!r}, which {info.module.__name__} lacks"


@pytest.mark.parametrize("path", CARDS, ids=IDS)
def test_sections_are_complete_and_in_order(path: Path) -> None:
    _, body = _split(path)
    positions = []
    for heading in SECTIONS:
        found = re.search(rf"^{re.escape(heading)}\s*$", body, re.M)
        assert found, f"{path.parent.name}/card.md lacks the section {heading!r}"
        positions.append(found.start())
    assert positions == sorted(positions), f"{path.parent.name}/card.md: sections out of order"
    assert RESULTS.search(body), "the Results section needs the <!-- results:start/end --> markers"


@pytest.mark.parametrize("path", CARDS, ids=IDS)
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what a block makes with tempfile goes with the test
    _, body = _split(path)
    blocks = _python_blocks(body)
    assert len(blocks) >= 2, "a card shows at least the functional and the Trainer usage"
    namespace: dict = {"__name__": f"card_{path.parent.name}"}
    for index, block in enumerate(blocks):
        try:
            exec(compile(block, f"{path.parent.name}/card.md[block {index}]", "exec"), namespace)
        except Exception as error:  # name the block that failed
            raise AssertionError(f"{path.parent.name}/card.md python block {index} failed: {error!r}") from error


@pytest.mark.parametrize("path", CARDS, ids=IDS)
def test_results_open_with_one_line_in_plain_words(path: Path) -> None:
    """Issue 31: a reader learns "should I use it, here, for what" before any table, and can paste the commands."""
    found = RESULTS.search(_split(path)[1])
    assert found, "the Results section needs the <!-- results:start/end --> markers"
    block = found.group(0).split("-->", 1)[1].strip()
    first = block.splitlines()[0]
    assert first.startswith(("**In short.** On ", "Not measured in ")), f"{path.parent.name}: Results open {first!r}"
    commands = re.findall(r"^- runs: `([^`]*)`", block, re.M)
    assert not [c for c in commands if re.search(r"(^|\s|=)/", c)], "a run command holds an absolute path"
