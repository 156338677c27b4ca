"""Facts from runs: what a sanitized test run observed about the linted code's functions, saved
by `pytest --csan --csan-facts FILE` (or `csan-lint --confirm --save-facts FILE`) and read back by
the static pass (`csan-lint --facts FILE`) to settle its assumptions about a function's entry
context (lint/analysis/assumptions.py).

This module is the file's one definition, shared by both halves: its schema, how a function is
named (`module:Class.method`) and how its source is hashed, so that a fact recorded from a file
applies only while the function's text is what it was. Plain data: no libcst, no torch (the
runtime writes with it, the static pass reads with it).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1
WRITTEN = ("same", "other", "never")
"""Where a tensor argument was last written before the function's first operation, relative
to the stream it was entered on: that stream, another one, or never on the device."""
DEVICES = ("cuda", "cpu", "pinned")
ENTRY_KINDS = ("default", "side")
DIRECTIONS = ("h2d", "d2h")
MAX_TESTS = 3
"""Node ids kept per observed context: enough to say where to look, bounded as suites grow."""


class FactsFileError(Exception):
    """A facts file that cannot be read: the message names the file and the entry."""


def source_hash(lines: Sequence[str]) -> str:
    """The hash of a function's text (its decorators to its last line), trailing spaces and
    line endings ignored, so that a checkout with other line endings keeps its facts."""
    text = "\n".join(line.rstrip() for line in lines)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def function_hashes(source: str) -> dict[str, tuple[int, str]]:
    """Every function and method of a module, by its qualified name as Python spells it
    (`Class.method`, `outer.<locals>.inner`), to (its first line, the hash of its text). The
    first line is the first decorator's, as a code object's `co_firstlineno`. {} if the
    source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    lines = source.splitlines()
    found: dict[str, tuple[int, str]] = {}
    for qualname, node in _functions(tree.body, ""):
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        last = node.end_lineno or node.lineno
        found[qualname] = (first, source_hash(lines[first - 1 : last]))
    return found


def _functions(body: Sequence[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node.body, f"{name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _functions([n for n in inner if isinstance(n, ast.stmt)], prefix)
                    for handler in inner:
                        if isinstance(handler, ast.ExceptHandler):
                            yield from _functions(handler.body, prefix)


@dataclass(frozen=True)
class Argument:
    """One tensor argument as a call saw it."""

    name: str
    written: str
    """One of WRITTEN."""
    device: str
    """One of DEVICES."""

    def words(self, entry_name: str) -> str:
        where = {
            "same": f"last written on the stream the call was entered on ({entry_name})",
            "other": f"last written on another stream than the one the call was entered on ({entry_name})",
            "never": "never written on the device",
        }[self.written]
        return f"`{self.name}` came as a {self.device} tensor {where}"


@dataclass(frozen=True)
class Context:
    """One way a function was called: the stream it was entered on, its tensor arguments, and
    the tests that called it so (up to MAX_TESTS)."""

    entry: str
    """One of ENTRY_KINDS."""
    entry_name: str
    """The sanitizer's name for that stream (`the default stream`, `stream created at x.py:3 (side)`)."""
    arguments: tuple[Argument, ...]
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Copy:
    direction: str
    non_blocking: bool
    tests: tuple[str, ...]


@dataclass(frozen=True)
class FunctionFacts:
    """What the runs observed about one function whose text hashed to `source_hash`."""

    module: str
    qualname: str
    source_hash: str
    contexts: tuple[Context, ...]
    copies: tuple[Copy, ...] = ()
    file: str = ""
    """Its file as the run named it (relative to the run's working directory), for `summary`."""

    def written_argument(self, name: str) -> tuple[Argument, Context] | None:
        """The first observed call that got `name` as a tensor written on the device (on the
        entry stream or another): evidence that its producer is the caller's device work."""
        return self.argument(name, lambda argument: argument.written != "never")

    def argument(self, name: str, seen: Callable[[Argument], bool]) -> tuple[Argument, Context] | None:
        """The first observed call that got `name` as an argument `seen` holds of."""
        for context in self.contexts:
            for argument in context.arguments:
                if argument.name == name and seen(argument):
                    return argument, context
        return None

    def entered_on_default(self) -> bool:
        """Whether the runs saw the function called, and every call entered on the default
        stream: there, `default_stream()` is its caller's stream."""
        return bool(self.contexts) and all(context.entry == "default" for context in self.contexts)


def copy_observation(copy: Copy) -> str:
    """How a finding lists an observed non-blocking download instead of an assumption."""
    tests = ", ".join(copy.tests) or "a sanitized run"
    return f"observed in {tests}: the function made a non-blocking copy to the host"


def observation(argument: Argument, context: Context) -> str:
    """How a finding lists the fact it rests on instead of an assumption."""
    tests = ", ".join(context.tests) or "a sanitized run"
    return f"observed in {tests}: {argument.words(context.entry_name)}"


@dataclass(frozen=True)
class ModuleFacts:
    """The facts about one module's functions that still match its source; `stale`: those
    whose function changed (or is gone) since they were recorded, ignored."""

    functions: Mapping[str, FunctionFacts]
    stale: int = 0

    def of(self, qualname: str | None) -> FunctionFacts | None:
        return self.functions.get(qualname) if qualname is not None else None

    def written_argument(self, qualname: str | None, name: str) -> str | None:
        """The observation (as a finding lists it) that the function's argument `name` came
        written on the device by its caller; None where no run saw it so."""
        facts = self.of(qualname)
        found = facts.written_argument(name) if facts is not None else None
        return observation(*found) if found is not None else None

    def kept_by_caller(self, qualname: str | None) -> frozenset[str]:
        """Parameters the function's caller is known to go on using after the call (a hook's
        arguments, lint/hooks.py); runs do not say."""
        return frozenset()

    def pinned_argument(self, qualname: str | None, name: str) -> str | None:
        """The observation that a call handed the function's argument `name` as pinned host
        memory (a copy into it may not block); None where no run saw it so."""
        facts = self.of(qualname)
        found = facts.argument(name, lambda argument: argument.device == "pinned") if facts is not None else None
        return observation(*found) if found is not None else None

    def non_blocking_download(self, qualname: str | None) -> str | None:
        """The observation (as a finding lists it) that a run saw the function copy to the host
        without blocking; None where none did."""
        facts = self.of(qualname)
        copies = facts.copies if facts is not None else ()
        found = next((copy for copy in copies if copy.direction == "d2h" and copy.non_blocking), None)
        return copy_observation(found) if found is not None else None

    def entered_on_default(self, qualname: str | None) -> bool:
        """Whether every call a run saw of the function was entered on the default stream (and
        one was seen)."""
        facts = self.of(qualname)
        return facts is not None and facts.entered_on_default()


NO_MODULE_FACTS = ModuleFacts({})


class ObservedFacts:
    """A facts file, loaded: its functions by module, and the file's digest (the lint cache's key)."""

    def __init__(self, functions: Sequence[FunctionFacts], digest: str = "", path: str = "") -> None:
        self.digest = digest
        self.path = path
        self.functions = functions
        self.by_module: dict[str, list[FunctionFacts]] = {}
        for facts in functions:
            self.by_module.setdefault(facts.module, []).append(facts)

    def for_module(self, path: str, source: str) -> ModuleFacts:
        """The facts recorded for the module at `path` whose function text is unchanged. The run
        named the module as it was imported (`pkg.comm`), the linter by its path
        (`src/pkg/comm.py`): a module matches where its imported name ends the dotted path."""
        dotted = _dotted(path)
        recorded = [
            facts
            for module, group in self.by_module.items()
            if dotted == module or dotted.endswith("." + module)
            for facts in group
        ]
        if not recorded:
            return NO_MODULE_FACTS
        hashes = function_hashes(source)
        kept = {  # by the linter's name: a nested function is `outer.inner`, not `outer.<locals>.inner`
            facts.qualname.replace(".<locals>.", "."): facts
            for facts in recorded
            if facts.qualname in hashes and hashes[facts.qualname][1] == facts.source_hash
        }
        return ModuleFacts(kept, len(recorded) - len(kept))

    def summary(self) -> str:
        """How many recorded functions still hold, and how many are ignored because their
        text changed (or they, or their file, are gone) since the run (`-v`)."""
        hashes: dict[str, dict[str, tuple[int, str]]] = {}
        ignored = 0
        for facts in self.functions:
            if facts.file not in hashes:
                try:
                    with open(facts.file, encoding="utf-8") as stream:
                        hashes[facts.file] = function_hashes(stream.read())
                except (OSError, UnicodeDecodeError):
                    hashes[facts.file] = {}
            found = hashes[facts.file].get(facts.qualname)
            ignored += found is None or found[1] != facts.source_hash
        return (
            f"facts from runs ({self.path}): {len(self.functions) - ignored} function(s) hold, "
            f"{ignored} ignored (changed or gone since the run)"
        )


def _dotted(path: str) -> str:
    parts = [part for part in path.replace("\\", "/").removesuffix(".py").split("/") if part not in ("", ".")]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# -- the file ------------------------------------------------------------------------------


def dump(functions: Sequence[Mapping[str, Any]]) -> str:
    """The file's text: the schema version and the functions, in a stable order (a committed
    file diffs by function)."""
    ordered = sorted(functions, key=lambda entry: (entry["module"], entry["qualname"], entry["source_hash"]))
    return json.dumps({"version": SCHEMA_VERSION, "functions": ordered}, indent=1, sort_keys=True) + "\n"


def merge_files(paths: Sequence[str], out: str) -> None:
    """One facts file out of several (pytest processes, xdist workers), each checked first:
    a function's contexts and copies are united, each keeping up to MAX_TESTS node ids."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in paths:
        load_facts(path)
        with open(path, encoding="utf-8") as stream:
            entries = json.load(stream)["functions"]
        for entry in entries:
            key = (entry["module"], entry["qualname"], entry["source_hash"])
            known = merged.setdefault(key, {**entry, "contexts": [], "copies": []})
            for kind in ("contexts", "copies"):
                for item in entry.get(kind, []):
                    _unite(known[kind], item)
    with open(out, "w", encoding="utf-8") as stream:
        stream.write(dump(list(merged.values())))


def _unite(items: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    """`item` added to `items`, or its tests to the equal item's."""
    bare = {**item, "tests": None}
    for known in items:
        if {**known, "tests": None} == bare:
            known["tests"] = [*known["tests"], *(t for t in item["tests"] if t not in known["tests"])][:MAX_TESTS]
            return
    items.append(dict(item))


def load_facts(path: str) -> ObservedFacts:
    """Reads and checks a facts file; FactsFileError names the file and the entry that is wrong."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        raise FactsFileError(f"{path}: cannot read the facts file: {error.strerror}") from None
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise FactsFileError(f"{path}: not a JSON facts file: {error}") from None
    if not isinstance(document, dict) or document.get("version") != SCHEMA_VERSION:
        version = document.get("version") if isinstance(document, dict) else None
        raise FactsFileError(f"{path}: expected a facts file of version {SCHEMA_VERSION}, got version {version!r}")
    entries = document.get("functions")
    if not isinstance(entries, list):
        raise FactsFileError(f"{path}: `functions`: expected a list")
    digest = hashlib.blake2b(data, digest_size=12).hexdigest()
    functions = [_function(entry, f"{path}: functions[{i}]") for i, entry in enumerate(entries)]
    return ObservedFacts(functions, digest, path)


def _function(entry: object, where: str) -> FunctionFacts:
    table = _table(entry, where)
    contexts = tuple(_context(item, f"{where}.contexts[{i}]") for i, item in enumerate(_list(table, "contexts", where)))
    copies = tuple(
        Copy(
            _choice(_table(item, f"{where}.copies[{i}]"), "direction", DIRECTIONS, f"{where}.copies[{i}]"),
            _bool(_table(item, f"{where}.copies[{i}]"), "non_blocking", f"{where}.copies[{i}]"),
            _tests(_table(item, f"{where}.copies[{i}]"), f"{where}.copies[{i}]"),
        )
        for i, item in enumerate(_list(table, "copies", where))
    )
    return FunctionFacts(
        _string(table, "module", where),
        _string(table, "qualname", where),
        _string(table, "source_hash", where),
        contexts,
        copies,
        str(table.get("file", "")),
    )


def _context(entry: object, where: str) -> Context:
    table = _table(entry, where)
    arguments = []
    for i, item in enumerate(_list(table, "arguments", where)):
        at = f"{where}.arguments[{i}]"
        argument = _table(item, at)
        arguments.append(
            Argument(
                _string(argument, "name", at),
                _choice(argument, "written", WRITTEN, at),
                _choice(argument, "device", DEVICES, at),
            )
        )
    return Context(
        _choice(table, "entry", ENTRY_KINDS, where),
        _string(table, "entry_name", where),
        tuple(arguments),
        _tests(table, where),
    )


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FactsFileError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(table: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = table.get(key, [])
    if not isinstance(value, list):
        raise FactsFileError(f"{where}: `{key}`: expected a list")
    return value


def _string(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise FactsFileError(f"{where}: `{key}`: expected a non-empty string, got {value!r}")
    return value


def _choice(table: Mapping[str, Any], key: str, choices: Sequence[str], where: str) -> str:
    value = table.get(key)
    if value not in choices:
        raise FactsFileError(f"{where}: `{key}`: expected one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _bool(table: Mapping[str, Any], key: str, where: str) -> bool:
    value = table.get(key)
    if not isinstance(value, bool):
        raise FactsFileError(f"{where}: `{key}`: expected true or false, got {value!r}")
    return value


def _tests(table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    tests = _list(table, "tests", where)
    if not all(isinstance(test, str) for test in tests):
        raise FactsFileError(f"{where}: `tests`: expected a list of node ids")
    return tuple(tests)
