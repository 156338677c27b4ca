"""Per-file results cache in `.csan_lint_cache/` at the project root, so that a re-run only lints
what changed.

A warm run is dominated by discovery, reading and hashing, not by parsing, so an entry is keyed
by the file's absolute path and remembers its `(mtime_ns, size)` as well as its content hash:
an unchanged stat skips even reading the file; a changed stat with the same bytes (a `touch`, a
checkout) costs a read and a hash, never a parse. Files the prefilter rejects get entries too:
they cost nothing to store and spare the next run reading them.

A parsed file's findings also depend on other modules: calls into functions imported from
them are followed (csan_lint.lint.summaries, lint/shell/project.py). So its entry also holds what its
lint asked the package index: each module name it looked up, the module that resolved to (or
none) and that module's content hash. It is a hit only in a run whose index resolves every one
of those names to a module with the same hash: editing a helper module re-lints its importers,
not every parsed file, and adding a module that makes a name ambiguous re-lints the files that
used the name.

Everything else that decides a file's findings besides its bytes is in the name of the cache file:
the csan-lint version, a fingerprint of the analysis sources (an editable install changes code
without changing its version), the rule selection (`select`, `ignore`) and `per-file-ignores`
with the root they are relative to: per-file ignores choose which rules run on a file, so they
apply before caching, and changing them starts a fresh cache. The selectors are keyed as
written, not resolved to codes: resolving them would import every rule (and libcst) on a run
that may parse nothing.

Safe to share between concurrent runs: the file is read once, written once at the end of a run
that changed something (temp file + `os.replace`, merged with what another run wrote meanwhile),
so a reader sees a whole file or the previous one; anything unreadable or malformed, whole file
or single entry, is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csan_lint import __version__
from csan_lint import rules as rules_package
from csan_lint.lint.model import Edit, Finding, Span
from csan_lint.lint.models import shipped_models
from csan_lint.lint.shell.config import Config

CACHE_DIR_NAME = ".csan_lint_cache"
FORMAT = 6
"""Bump when the layout of an entry changes."""
RACY_NS = 2_000_000_000
"""A file modified this recently may change again within the same mtime tick without changing
its size; its stat is not trusted (the next run hashes it), as git does for racy index entries."""

Stat = tuple[int, int]
"""(mtime_ns, size)."""


def file_stat(path: str | Path) -> Stat | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


Deps = tuple[tuple[str, str | None, str | None], ...]
"""(module name a lookup asked the package index for, the module it resolved to or None, that
module's content hash or None), sorted: what a parsed file's findings depend on besides its bytes."""


@dataclass(frozen=True)
class Hit:
    findings: list[Finding]
    parsed: bool
    """Whether the file passed the prefilter (its findings came from the engine)."""
    digest: str
    orders: bool
    """Whether the file belongs in the package index (it mentions an ordering API)."""
    deps: Deps = ()
    """What its findings depend on besides its own bytes (`Deps`)."""
    stream_code: frozenset[int] | None = None
    """The lines the recognizer calls stream code, when the run that stored it asked (`--confirm`)."""


def prepare_directory(directory: Path) -> None:
    """Create the cache directory, ignored by git and tagged as a cache for backup tools.
    Raises OSError when it cannot be written."""
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by csan-lint automatically.\n*\n")
        (directory / "CACHEDIR.TAG").write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n# This is a csan-lint cache directory.\n"
        )


def analysis_key() -> str:
    """The csan-lint version and its analysis sources: what a summary depends on besides its module."""
    return hashlib.blake2b(f"{FORMAT}:{__version__}:{_source_fingerprint()}".encode(), digest_size=12).hexdigest()


def _source_fingerprint() -> str:
    """Names, sizes and mtimes of the analysis modules (lint/, its subpackages, rules/): a few
    dozen stats, no imports."""
    digest = hashlib.blake2b(digest_size=16)
    lint = Path(__file__).parent.parent  # this module is in lint/shell/
    subpackages = sorted(entry.path for entry in os.scandir(lint) if (Path(entry.path) / "__init__.py").is_file())
    for directory in (lint, *map(Path, subpackages), *map(Path, rules_package.__path__)):
        try:
            entries = sorted(
                (entry.name, entry.stat()) for entry in os.scandir(directory) if entry.name.endswith(".py")
            )
        except OSError:
            continue
        for name, status in entries:
            digest.update(f"{directory}/{name}:{status.st_mtime_ns}:{status.st_size}\n".encode())
    return digest.hexdigest()


def settings_key(config: Config) -> str:
    """Everything besides a file's path and bytes that decides its findings."""
    settings = {
        "format": FORMAT,
        "version": __version__,
        "sources": _source_fingerprint(),
        "root": str(config.root),
        "select": None if config.select is None else list(config.select),
        "extend_select": list(config.extend_select),
        "ignore": list(config.ignore),
        "per_file_ignores": sorted((pattern, list(codes)) for pattern, codes in config.per_file_ignores.items()),
        "spellings": dataclasses.asdict(config.spellings),
        "shipped_models": shipped_models(),
        "assumptions": config.assumptions.key(),
        "facts": config.facts.digest if config.facts is not None else None,
    }
    return hashlib.blake2b(json.dumps(settings, sort_keys=True).encode(), digest_size=12).hexdigest()


def _encode(findings: list[Finding]) -> list[list[Any]]:
    """Without the path: it is shown relative to the working directory, which may differ."""
    return [
        [
            f.line,
            f.column,
            f.code,
            f.message,
            f.end_line,
            f.end_column,
            f.span.start_line,
            f.span.end_line,
            f.fix,
            [[edit.line, edit.anchor_line, edit.text, edit.scope] for edit in f.edits],
            f.fix_safety,
            [list(f.assumptions), list(f.observed)],
        ]
        for f in findings
    ]


def _decode(rows: Any, shown: str) -> list[Finding]:
    """Raises TypeError/ValueError on a malformed entry (a miss for the caller)."""
    findings = []
    for row in rows:
        line, column, code, message, end_line, end_column, span_start, span_end, fix, edit_rows, safety, rests = row
        assumptions, observed = (tuple(_strings(names)) for names in rests)
        numbers = (line, column, end_line, end_column, span_start, span_end)
        texts_ok = isinstance(code, str) and isinstance(message, str) and isinstance(fix, (str, type(None)))
        if not (all(type(n) is int for n in numbers) and texts_ok and safety in ("safe", "unsafe")):
            raise TypeError(f"malformed cached finding: {row!r}")
        edits = tuple(_edit(edit_row) for edit_row in edit_rows)
        span = Span(span_start, span_end)
        findings.append(
            Finding(
                shown,
                line,
                column,
                code,
                message,
                end_line,
                end_column,
                span,
                fix,
                edits,
                safety,
                assumptions,
                observed,
            )
        )
    return findings


def _strings(row: Any) -> list[str]:
    if not (isinstance(row, list) and all(isinstance(item, str) for item in row)):
        raise TypeError(f"malformed cached names: {row!r}")
    return row


def _edit(row: Any) -> Edit:
    line, anchor_line, text, scope = row
    if not (type(line) is int and type(anchor_line) is int and type(scope) is int and isinstance(text, str)):
        raise TypeError(f"malformed cached edit: {row!r}")
    return Edit(line, anchor_line, text, scope)


def _lines(value: Any) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(line) is int for line in value):
        raise TypeError(f"malformed cached lines: {value!r}")
    return frozenset(value)


def _deps(value: Any) -> Deps:
    if not isinstance(value, list):
        raise TypeError(f"malformed cached dependencies: {value!r}")
    deps = []
    for dotted, module, digest in value:
        if not (
            isinstance(dotted, str) and isinstance(module, (str, type(None))) and isinstance(digest, (str, type(None)))
        ):
            raise TypeError(f"malformed cached dependency: {dotted!r}")
        deps.append((dotted, module, digest))
    return tuple(deps)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


class ResultCache:
    """The entries of one settings key; `lookup` before reading a file, `store` after linting it,
    `save` once at the end."""

    def __init__(self, root: Path, config: Config) -> None:
        self.directory = root / CACHE_DIR_NAME
        self.file = self.directory / f"results-{settings_key(config)}.json"
        self._entries = self._load()
        self._changed: dict[str, dict[str, Any] | None] = {}
        """Entries this run wrote (None: dropped), merged into the file at `save`."""

    def _load(self) -> dict[str, Any]:
        try:
            document = json.loads(self.file.read_bytes())
        except (OSError, ValueError):  # absent, unreadable, truncated or not JSON: all misses
            return {}
        entries = document.get("entries") if isinstance(document, dict) else None
        return entries if isinstance(entries, dict) else {}

    def lookup(self, path: Path, shown: str, stat: Stat | None, digest: str | None = None) -> Hit | None:
        """The cached result when the stat matches (`digest` None) or the content hash does."""
        entry = self._entries.get(str(path))
        if not isinstance(entry, dict):
            return None
        try:
            if digest is not None:
                if entry.get("hash") != digest:
                    return None
            elif stat is None or entry.get("stat") != list(stat):
                return None
            hit = Hit(
                _decode(entry["findings"], shown),
                entry["parsed"] is True,
                _text(entry["hash"]),
                entry["orders"] is True,
                _deps(entry["deps"]),
                _lines(entry.get("stream")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if digest is not None:  # same bytes, new stat
            self._remember(
                path, stat, entry["findings"], hit.parsed, hit.digest, hit.orders, hit.deps, entry.get("stream")
            )
        return hit

    def store(
        self,
        path: Path,
        stat: Stat | None,
        findings: list[Finding],
        *,
        parsed: bool,
        digest: str,
        orders: bool = False,
        deps: Deps = (),
        stream_code: frozenset[int] | None = None,
    ) -> None:
        lines = None if stream_code is None else sorted(stream_code)
        self._remember(path, stat, _encode(findings), parsed, digest, orders, deps, lines)

    def drop(self, path: Path) -> None:
        """Forget a file whose result is not cacheable (unreadable, or the linter failed on it)."""
        if str(path) in self._entries:
            self._changed[str(path)] = None

    def _remember(
        self,
        path: Path,
        stat: Stat | None,
        rows: list[Any],
        parsed: bool,
        digest: str,
        orders: bool,
        deps: Deps,
        stream_code: list[int] | None,
    ) -> None:
        trusted = stat is not None and time.time_ns() - stat[0] > RACY_NS
        entry = {
            "stat": list(stat) if trusted and stat else None,
            "hash": digest,
            "findings": rows,
            "parsed": parsed,
            "orders": orders,
            "deps": [list(dep) for dep in deps],
            "stream": stream_code,
        }
        self._entries[str(path)] = entry
        self._changed[str(path)] = entry

    def save(self) -> None:
        """Merge this run's entries into what is on disk now and replace the file atomically.
        A cache that cannot be written (read-only tree, full disk) is only a slower next run."""
        if not self._changed:
            return
        try:
            prepare_directory(self.directory)
            entries = self._load()  # another run may have saved since this one started
            for path, entry in self._changed.items():
                if entry is None:
                    entries.pop(path, None)
                else:
                    entries[path] = entry
            entries = {path: entry for path, entry in entries.items() if os.path.exists(path)}
            temporary = self.directory / f".{self.file.name}.{os.getpid()}.{time.time_ns()}.tmp"
            try:
                temporary.write_text(json.dumps({"entries": entries}, separators=(",", ":")))
                os.replace(temporary, self.file)
            finally:
                temporary.unlink(missing_ok=True)
        except OSError:
            return
        self._changed.clear()
