"""Models of code the linter cannot read: what an opaque callable (a C++ extension's entry
point, another package's helper) does to streams, declared in TOML as Pysa models and typeshed
stubs describe code an analyser does not see.

A model names a dotted callable, matched as the `Spellings` settings' entries are (as imported,
as written, or by its last names), and declares one effect from a closed vocabulary, each the
operation of an entry of the stream API's table (lint/analysis/api.py): the analysis then
treats a call of it as a call of that entry. Models come from `[[tool.csan-lint.model]]` and
from the file `models = "..."` names (its `[[model]]` array). Plain data: no libcst, no torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind, On

NAME_KEY = "name"
EFFECTS: Mapping[str, Mapping[object, tuple[Kind, On | None]]] = {
    "enters-stream": {True: (Kind.ENTER_STREAM, None)},
    "returns": {
        "stream": (Kind.STREAM_CREATE, None),
        "current-stream": (Kind.CURRENT_STREAM, None),
        "event": (Kind.EVENT_CREATE, None),
    },
    "synchronizes": {"device": (Kind.HOST_SYNC, On.DEVICE), "current-stream": (Kind.HOST_SYNC, On.CURRENT)},
    "launches": {"in-place": (Kind.LAUNCH, None)},
}
"""Each effect key, its values, and the table's operation a call of the modelled callable then
performs: `enters-stream = true`, used in `with`, makes its first argument (or `stream=`)
current, as `torch.cuda.stream(s)`; `returns` a new stream, the current stream or a new event;
`synchronizes` the host with the whole device (`torch.cuda.synchronize()`) or with the current
stream (the host waits for the work queued on it so far, as NCCL's `barrier()`); `launches`
work on the current stream that writes its first argument in place and, called with
`async_op=True`, returns a handle whose `wait()` makes the current stream wait for that work (as
torch.distributed's collectives)."""
KEYS = (NAME_KEY, *EFFECTS)
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


class ModelsError(Exception):
    """A malformed model: the message names the file (or table), the entry and the key."""


def parse_models(entries: object, where: str) -> tuple[tuple[str, str], ...]:
    """Each model as (its dotted callable, the canonical name of the table's entry it acts as).
    `where` locates the array in its file (`csan-models.toml: model`)."""
    if not isinstance(entries, list):
        raise ModelsError(f"{where}: expected an array of tables ([[model]]), got {entries!r}")
    return tuple(_model(entry, f"{where}[{index}]") for index, entry in enumerate(entries))


def _model(entry: object, where: str) -> tuple[str, str]:
    if not isinstance(entry, dict):
        raise ModelsError(f"{where}: expected a table, got {entry!r}")
    for key in entry:
        if key not in KEYS:
            raise ModelsError(f"{where}: unknown key `{key}`{_guess(key, KEYS)}")
    name = entry.get(NAME_KEY)
    if not isinstance(name, str) or not _DOTTED.fullmatch(name):
        stripped = name.strip().removesuffix("()") if isinstance(name, str) else ""
        hint = f"; did you mean `{stripped}`?" if _DOTTED.fullmatch(stripped) else ""
        raise ModelsError(
            f"{where}: `{NAME_KEY}`: expected a dotted name like `pkg.module.function`, got {name!r}{hint}"
        )
    effects = [key for key in entry if key in EFFECTS]
    if len(effects) != 1:
        found = ", ".join(f"`{key}`" for key in effects) or "none"
        raise ModelsError(f"{where}: expected one effect ({', '.join(EFFECTS)}), got {found}")
    key = effects[0]
    value, choices = entry[key], EFFECTS[key]
    boolean = any(isinstance(choice, bool) for choice in choices)
    if not isinstance(value, bool if boolean else str) or value not in choices:
        expected = " or ".join(_toml(choice) for choice in choices)
        guess = _guess(value, [str(choice) for choice in choices]) if isinstance(value, str) else ""
        raise ModelsError(f"{where}: `{key}`: expected {expected}, got {_toml(value)}{guess}")
    kind, on = choices[value]
    return name, api.canonical_of(kind, on)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _guess(word: str, choices: Sequence[str]) -> str:
    import difflib  # only for a mistake: not on every run's start-up

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.7)
    return f"; did you mean `{close[0]}`?" if close else ""


def models_file(path: str, shown: str) -> tuple[tuple[str, str], ...]:
    """The `[[model]]` array of a models file (`shown`: its path as errors name it)."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        raise ModelsError(f"{shown}: cannot read the models file: {error.strerror}") from None
    return _models_text(data, shown)


@cache
def shipped_models() -> tuple[tuple[str, str], ...]:
    """The models csan-lint ships for common libraries (lint/analysis/models.toml), read once."""
    shipped = resources.files("csan_lint.lint.analysis").joinpath("models.toml")
    return _models_text(shipped.read_bytes(), "csan_lint/lint/analysis/models.toml")


def _models_text(data: bytes, shown: str) -> tuple[tuple[str, str], ...]:
    import tomllib

    try:
        document: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ModelsError(f"{shown}: invalid TOML: {error}") from None
    for key in document:
        if key != "model":
            raise ModelsError(
                f"{shown}: unknown key `{key}`{_guess(key, ['model'])} (a models file holds [[model]] tables)"
            )
    return parse_models(document.get("model", []), f"{shown}: model")
