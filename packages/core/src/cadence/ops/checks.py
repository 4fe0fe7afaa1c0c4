"""Argument checks for public APIs: each names the argument, echoes the value and says what is allowed.

Booleans are not numbers, strings are not booleans, and NaN and infinities are not
hyperparameters. The trainer and every method validate their arguments with these before any
work is done::

    alpha = check_number("alpha", alpha, gt=0)            # "`alpha`=inf must be a finite number > 0"
    keep = check_number("keep", keep, gt=0, le=1)         # in (0, 1]
    depth = check_int("depth", depth, ge=1)
    batched = check_bool("batched", batched)
    start = check_time("ema_start", ema_start, (TimeUnit.DURATION, TimeUnit.EPOCH))  # '0.5dur', 0.5, '3ep'

Wrong values raise `ValueError`; wrong types raise `ArgumentTypeError`, which is both a
`TypeError` and a `ValueError` (for the caller, a wrong type is a wrong value: catch either).
`hint` adds the usual value or the fix.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

from cadence.time import Time, TimeUnit

__all__ = [
    "MAX_SEED",
    "ArgumentTypeError",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_int",
    "check_number",
    "check_seed",
    "check_time",
    "describe",
]

MAX_SEED = 2**63 - 1
"""The largest seed every torch generator accepts."""


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a bool for a number, a string for a bool, ...)."""


def describe(value: Any) -> str:
    """`value` as an error message shows it: its repr, with the type when the repr hides it."""
    if callable(value) and not isinstance(value, type):
        return f"{getattr(value, '__qualname__', type(value).__name__)} ({type(value).__name__})"
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if isinstance(value, (str, bool, int, float, type(None))):
        return shown
    return f"{shown} ({type(value).__name__})"


def _fail(kind: type[Exception], name: str, value: Any, expected: str, hint: str) -> Exception:
    message = f"`{name}`={describe(value)} must be {expected}"
    return kind(f"{message}; {hint}" if hint else message)


def _show(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _bounds(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    low = f"[{_show(ge)}" if ge is not None else f"({_show(gt)}" if gt is not None else None
    high = f"{_show(le)}]" if le is not None else f"{_show(lt)})" if lt is not None else None
    if low and high:
        return f" in {low}, {high}"
    if low:
        return f" >= {_show(ge)}" if ge is not None else f" > {_show(gt)}"  # type: ignore[arg-type]
    if high:
        return f" <= {_show(le)}" if le is not None else f" < {_show(lt)}"  # type: ignore[arg-type]
    return ""


def check_number(
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    hint: str = "",
) -> float:
    """A finite real number (never a bool) within the given bounds, returned as a float."""
    expected = f"a finite number{_bounds(gt, ge, lt, le)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(ArgumentTypeError, name, value, expected, hint)
    number = float(value)
    in_range = (
        math.isfinite(number)
        and (gt is None or number > gt)
        and (ge is None or number >= ge)
        and (lt is None or number < lt)
        and (le is None or number <= le)
    )
    if not in_range:
        raise _fail(ValueError, name, value, expected, hint)
    return number


def check_int(name: str, value: Any, *, ge: int | None = None, le: int | None = None, hint: str = "") -> int:
    """An int (never a bool, never a float such as 2.0) within the given bounds."""
    expected = f"an int{_bounds(None, ge, None, le)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(ArgumentTypeError, name, value, expected, hint)
    number = int(value)
    if (ge is not None and number < ge) or (le is not None and number > le):
        raise _fail(ValueError, name, value, expected, hint)
    return number


def check_bool(name: str, value: Any, hint: str = "") -> bool:
    """True or False; ``'no'``, ``0`` and ``None`` are refused (``bool('no')`` is True)."""
    if not isinstance(value, bool):
        raise _fail(ArgumentTypeError, name, value, "True or False", hint)
    return value


def check_seed(name: str, value: Any) -> int | None:
    """None (derive a seed) or an int in [0, 2**63 - 1], the range every torch generator accepts."""
    if value is None:
        return None
    return check_int(name, value, ge=0, le=MAX_SEED, hint="pass None to derive it from the run's seed")


def check_choice(name: str, value: Any, choices: Iterable[str], hint: str = "") -> str:
    """One of `choices` (strings); a misspelling gets the close match suggested."""
    allowed = list(choices)
    if isinstance(value, str) and value in allowed:
        return value
    close = difflib.get_close_matches(value, allowed, n=1) if isinstance(value, str) else []
    suggestion = f"did you mean {close[0]!r}?" if close else ""
    expected = f"one of {', '.join(map(repr, allowed))}"
    kind = ValueError if isinstance(value, str) else ArgumentTypeError
    raise _fail(kind, name, value, expected, "; ".join(part for part in (suggestion, hint) if part))


def check_callable(name: str, value: Any, *, arguments: int, signature: str, hint: str = "") -> Callable[..., Any]:
    """A callable that can be called with `arguments` positional arguments, e.g. ``(state, event)``."""
    expected = f"a callable {signature}"
    if not callable(value):
        raise _fail(ArgumentTypeError, name, value, expected, hint)
    try:
        inspect.signature(value).bind(*range(arguments))
    except TypeError:
        raise _fail(ArgumentTypeError, name, value, expected, hint or f"it cannot take {arguments} arguments") from None
    except ValueError:  # builtins without a signature: trust them
        pass
    return value


def check_time(name: str, value: Any, units: Iterable[TimeUnit], *, positive: bool = False) -> Time:
    """A method's time argument as a `Time` in one of `units`: a time string (``'500ba'``, ``'0.1dur'``),
    a `Time`, or a float, which means a fraction of the run (Composer's convention). A fraction of the
    run is at most 1; `positive` refuses zero. A bare int is refused: its unit would be a guess."""
    allowed = tuple(units)
    example = "'0.1dur'" if allowed[0] is TimeUnit.DURATION else f"'10{allowed[0].value}'"
    if isinstance(value, bool) or not isinstance(value, (str, Time, float)):
        raise ArgumentTypeError(
            f"`{name}`={describe(value)} is not a time: write a time string such as {example}, a Time, or a float "
            "fraction of the run"
        )
    try:
        time = Time(value, TimeUnit.DURATION) if isinstance(value, float) else Time.from_input(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"`{name}`={describe(value)} is not a time: {error}") from None
    too_long = time.unit is TimeUnit.DURATION and time.value > 1
    if time.unit not in allowed or time.value < 0 or (positive and time.value == 0) or too_long:
        names = ", ".join(unit.value if unit is not TimeUnit.DURATION else "dur (at most 1)" for unit in allowed)
        amount = f"{'a positive' if positive else 'an'} amount of {names}"
        raise _fail(ValueError, name, value, amount, f"e.g. {example}")
    return time
