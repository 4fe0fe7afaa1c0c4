"""Commands that can be pasted on another machine.

Record ``command`` tags hold the paths of the machine that ran them (``/home/x/cadence/method_cards/runs``);
`portable` shows them relative to the repository, and leaves out the options that name that machine's scratch
(its tracking store and log folder), so the defaults apply. The records are never changed. Standard library
only: a report imports it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["portable", "recipe_argument"]

RECORDS = re.compile(r"^(?P<root>.*?)/?method_cards/runs/?$")
RECIPE = re.compile(r"^(?P<root>.*?)/?harness/recipes/(?P<name>[^/]+)\.(?:toml|ya?ml)$")
SCRATCH = ("--tracking-uri", "--log-dir")  # where the running machine kept its store and logs


# Commands ---------------------------------------------------------------------------------------
def _path_of(value: str) -> str:
    return value.removeprefix("sqlite:///") if value.startswith("sqlite:///") else value


def _root(tokens: Sequence[str]) -> str | None:
    """The repository the command ran in, where one of its paths tells (the records folder, a shipped recipe)."""
    for token in tokens:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        match = RECORDS.match(value) or RECIPE.match(value)
        if match and value.startswith("/"):
            return match.group("root") or "/"
    return None


def _relative(value: str, root: str | None) -> str:
    records, recipe = RECORDS.match(value), RECIPE.match(value)
    if not value.startswith("/"):
        return value
    if records:
        return "method_cards/runs"
    if recipe:
        return recipe.group("name")
    if root is not None and os.path.commonpath([root, value]) in (root, os.path.dirname(root)):
        return os.path.relpath(value, root)  # the repository's own files, or a sibling such as ../shared/data
    return value


def _records(value: str, root: str | None) -> str:
    """A records folder: the repository's (or one inside it) relative; a scratch folder elsewhere, whose records
    were then brought into the repository (a GPU machine's output folder), as ``method_cards/runs``."""
    shown = _relative(value, root)
    return "method_cards/runs" if shown.startswith("/") else shown


def portable(command: str) -> str:
    """`command` with the running machine's paths relative to the repository: a records folder becomes
    ``method_cards/runs`` (so does a records folder outside any repository: a scratch folder whose records were
    brought in), a shipped recipe its name, a path inside (or beside) the repository a relative one;
    ``--tracking-uri`` and ``--log-dir`` naming a local file or folder are left out (the defaults apply)."""
    try:
        tokens = shlex.split(command)
    except ValueError:  # unbalanced quotes: show it as it was recorded
        return command
    root, kept, skip = _root(tokens), [], False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        option, _, attached = token.partition("=") if token.startswith("--") else (token, "", "")
        if option in SCRATCH:
            value = attached or (tokens[i + 1] if i + 1 < len(tokens) else "")
            if _path_of(value).startswith("/"):
                skip = not attached
                continue
        if option == "--records" and not attached and i + 1 < len(tokens) and tokens[i + 1].startswith("/"):
            kept += [option, _records(tokens[i + 1], root)]
            skip = True
        elif token.startswith("--") and attached:
            kept.append(f"{option}={_records(attached, root) if option == '--records' else _relative(attached, root)}")
        else:
            kept.append(_relative(token, root))
    return shlex.join(kept)


def recipe_argument(commands: Iterable[str], name: str) -> str:
    """How the grids of the study `name` named its recipe (their `portable` commands), for the commands a report
    prints to add runs to it: a recipe file by its path (a study's name is its file's stem, which ``cadence-bench
    grid`` cannot find), a shipped recipe by its name; `name` where no command named a file of that stem."""
    named: Counter[str] = Counter()
    for command in commands:
        try:
            tokens = shlex.split(portable(command))
        except ValueError:
            continue
        if "grid" in tokens and (at := tokens.index("grid") + 1) < len(tokens):
            recipe = tokens[at]
            stem, _, suffix = os.path.basename(recipe).rpartition(".")
            if suffix in ("toml", "yaml", "yml") and stem == name:
                named[recipe] += 1
    return named.most_common(1)[0][0] if named else name
