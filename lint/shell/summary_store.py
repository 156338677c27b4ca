"""Summaries of the project's functions kept across runs, by the content of their module, in
`.csan_lint_cache/summaries-<key>/`: a run that follows a call into an unchanged module reads
the summary a run before it worked out instead of parsing that module again.

A module's summaries depend on its text and on the analysis alone (`module_helpers` takes
neither the configuration nor other modules), so the key is the hash of the text, in a
directory named after the analysis (`cache.analysis_key`). One small JSON file per module
text, written by whichever process (a pool worker too) works out a summary it did not hold:
temp file + `os.replace`, so that concurrent runs and workers each see a whole file; an
unreadable or malformed file, or entry, is a miss.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from csan_lint.lint.summaries import Effect, Summary


def _key(name: str, on_current: frozenset[str]) -> str:
    return "\0".join([name, *sorted(on_current)])


def _effects(effects: tuple[Effect, ...]) -> list[list[Any]]:
    return [[e.key, e.stream, e.write, sorted(e.after), e.rebound] for e in effects]


def encode(summary: Summary | None) -> Any:
    if summary is None:
        return None
    return {
        "params": list(summary.params),
        "names": sorted(summary.names),
        "orders": [[token, sorted(after)] for token, after in summary.orders],
        "effects": _effects(summary.effects),
        "returned": _effects(summary.returned),
        "allocates": [sorted(params) for params in summary.allocates],
    }


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _decode_effects(rows: Any) -> tuple[Effect, ...]:
    effects = []
    for key, stream, write, after, rebound in rows:
        if not (isinstance(write, bool) and isinstance(rebound, bool)):
            raise TypeError(f"malformed effect: {key!r}")
        effects.append(Effect(_text(key), _text(stream), write, frozenset(_strings(after)), rebound))
    return tuple(effects)


def decode(value: Any) -> Summary | None:
    """Raises TypeError/ValueError/KeyError on a malformed entry (a miss for the caller)."""
    if value is None:
        return None
    return Summary(
        tuple(_strings(value["params"])),
        frozenset(_strings(value["names"])),
        tuple((_text(token), frozenset(_strings(after))) for token, after in value["orders"]),
        _decode_effects(value["effects"]),
        _decode_effects(value["returned"]),
        tuple(frozenset(_strings(params)) for params in value["allocates"]),
    )


class SummaryStore:
    """The summaries kept under `directory`; pickled to pool workers as its path alone."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._loaded: dict[str, dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"])  # type: ignore[misc]

    def lookup(self, digest: str, name: str, on_current: frozenset[str]) -> tuple[Summary | None] | None:
        """(the summary,) kept for the module with text hash `digest`; None when not kept."""
        entries = self._entries(digest)
        key = _key(name, on_current)
        if key not in entries:
            return None
        try:
            return (decode(entries[key]),)
        except (KeyError, TypeError, ValueError):
            del entries[key]  # a miss, written again once worked out
            return None

    def remember(self, digest: str, name: str, on_current: frozenset[str], summary: Summary | None) -> None:
        """Keep a summary worked out now; a store that cannot be written is only a slower next run."""
        entries = self._entries(digest)
        key = _key(name, on_current)
        if key in entries:
            return
        entries[key] = encode(summary)
        from csan_lint.lint.shell.cache import prepare_directory

        try:
            prepare_directory(self.directory.parent)
            self.directory.mkdir(exist_ok=True)
            merged = {**self._read(digest), **entries}  # another process may have written meanwhile
            temporary = self.directory / f".{digest}.{os.getpid()}.{time.time_ns()}.tmp"
            try:
                temporary.write_text(json.dumps(merged, separators=(",", ":")))
                os.replace(temporary, self.directory / f"{digest}.json")
            finally:
                temporary.unlink(missing_ok=True)
        except OSError:
            return

    def _entries(self, digest: str) -> dict[str, Any]:
        if digest not in self._loaded:
            self._loaded[digest] = self._read(digest)
        return self._loaded[digest]

    def _read(self, digest: str) -> dict[str, Any]:
        try:
            document = json.loads((self.directory / f"{digest}.json").read_bytes())
        except (OSError, ValueError):
            return {}
        return document if isinstance(document, dict) else {}
