"""The project index: every module of the project that may order stream work, whichever files a
run is given, so that a pre-commit run on one changed file follows its calls into the rest.

The project is the directory of the config file, or the working directory when it holds a
`pyproject.toml` or `.git` (`project_root`); its modules are found with the run's discovery
(`exclude`, .gitignore) and pass the same test as the files a run lints (`indexed`). What the
index needs of each module (content hash, membership, the top-level names with stream code that
promotion matches) is kept in `.csan_lint_cache/index-<settings key>.json`, by path with its
`(mtime_ns, size)` as the results cache keeps its entries: a warm run stats each module and
reads only the changed ones. The directories walked and the ignore files consulted are kept
too, with their stats: while none has changed, the walk is not done again (a file is added,
removed or renamed only by changing its directory's mtime). Summaries of the modules' functions
are kept apart, by module content (lint/shell/summary_store.py).

Safe to share between concurrent runs as the results cache is: read once, written once at the
end (temp file + `os.replace`); anything unreadable or malformed is a miss.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csan_lint.lint.diagnostics import MAX_PARSE_CHARS, decode_source
from csan_lint.lint.shell.cache import (
    CACHE_DIR_NAME,
    RACY_NS,
    Deps,
    Stat,
    content_hash,
    file_stat,
    prepare_directory,
    settings_key,
)
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import Excluder, discover, display_path, is_excluded, might_have_findings
from csan_lint.lint.shell.promote import stream_definitions
from csan_lint.lint.shell.suppress import skips_file
from csan_lint.lint.summaries import IndexedFile, may_order, module_name, resolve

FORMAT = 1
"""Bump when the layout of the index file changes."""
PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(config: Config) -> Path | None:
    """The project whose modules the index holds: the config file's directory, else the working
    directory (`config.root`) when it is a project's (a `pyproject.toml` or `.git` in it); None
    elsewhere, so that a run from an arbitrary directory never walks it."""
    root = config.root
    if config.source is not None or any(os.path.exists(root / marker) for marker in PROJECT_MARKERS):
        return root
    return None


def indexed(source: str, path: Path, config: Config) -> bool:
    """Whether a module enters the index: what the runner asks of the files it lints (the
    prefilter passes, a rule runs on it, it is small enough to parse) and a mention of an
    ordering API (`summaries.may_order`)."""
    return (
        not skips_file(source)
        and len(source) <= MAX_PARSE_CHARS
        and might_have_findings(source, config.spellings.leaves())
        and may_order(source)
        and bool(config.rules_for(path))
    )


@dataclass(frozen=True)
class Module:
    """What the index keeps of one file of the project."""

    stat: Stat | None
    digest: str
    member: bool
    """It enters the index (`indexed`)."""
    definitions: frozenset[str] = frozenset()
    """Of a member: its top-level names with stream code (`promote.stream_definitions`)."""


class ProjectIndex:
    """The modules under `root`; `note` what the run read itself, `refresh` for the rest, `save`."""

    def __init__(self, root: Path, config: Config, persist: bool) -> None:
        self.root = root
        self.config = config
        self.file = root / CACHE_DIR_NAME / f"index-{settings_key(config)}.json" if persist else None
        self.modules: dict[str, Module] = {}
        self._tree: dict[str, Any] = {}
        self._changed = False
        self._noted: dict[str, tuple[Stat | None, str, str | None, bool]] = {}
        self._load()

    def _load(self) -> None:
        if self.file is None:
            return
        try:
            document = json.loads(self.file.read_bytes())
            if document.get("format") != FORMAT:
                return
            tree = document["tree"]
            modules = {path: _module(entry) for path, entry in document["modules"].items()}
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            return  # absent, unreadable, truncated or malformed: built again
        if isinstance(tree, dict) and isinstance(tree.get("dirs"), dict) and isinstance(tree.get("ignores"), dict):
            self.modules, self._tree = modules, tree

    def note(self, path: Path, stat: Stat | None, digest: str, source: str | None, member: bool) -> None:
        """A file the run read (or found in the results cache): `refresh` takes it as it is, if
        it is one of the project's, instead of looking at it again."""
        self._noted[str(path)] = (stat, digest, source, member)

    def refresh(self, walk: tuple[set[str], list[Path], Excluder] | None = None) -> None:
        """Bring every module up to date: walk the tree unless nothing in it moved, take what
        the run noted, stat each other module, read and index the changed ones. `walk`: the run
        walked the whole project itself (the files it found, the directories it listed, its
        excluder)."""
        paths = self._record(*walk) if walk is not None else self._recorded_paths()
        if paths is None:
            excluder = Excluder(self.config.root, self.config.exclude, self.config.respect_gitignore)
            walked: list[Path] = []
            found = {
                str(path) for path in discover([str(self.root)], excluder, walked=walked) if isinstance(path, Path)
            }
            paths = self._record(found, walked, excluder)
        for path in paths:
            if path in self._noted:
                self._take(Path(path), *self._noted[path])
                continue
            stat = file_stat(path)
            known = self.modules.get(path)
            if known is None or known.stat is None or known.stat != stat:
                self._index(Path(path), stat)

    def _take(self, path: Path, stat: Stat | None, digest: str, source: str | None, member: bool) -> None:
        known = self.modules.get(str(path))
        if known is not None and known.digest == digest and known.member == member:
            if known.stat != stat:
                self._keep(path, Module(stat, digest, member, known.definitions))
            return
        if member and source is None:
            self._index(path, stat)
            return
        self._keep(path, Module(stat, digest, member, stream_definitions(source) if member and source else frozenset()))

    def members(self) -> Iterator[tuple[str, Module]]:
        """(absolute path, module) of every module in the index."""
        return ((path, module) for path, module in self.modules.items() if module.member)

    def _recorded_paths(self) -> list[str] | None:
        """The files of the last walk, when no directory walked nor ignore file read has changed."""
        dirs, ignores = self._tree.get("dirs"), self._tree.get("ignores") or {}
        if not dirs:
            return None
        now = time.time_ns()
        for directory, mtime in dirs.items():
            stat = file_stat(directory)
            if stat is None or stat[0] != mtime or now - mtime <= RACY_NS:
                return None
        for ignore, recorded in ignores.items():
            stat = file_stat(ignore)
            if (list(stat) if stat else None) != recorded:
                return None
        return list(self.modules)

    def _record(self, found: set[str], walked: list[Path], excluder: Excluder) -> list[str]:
        """The project's files are `found` now, by a walk of `walked` under `excluder`'s rules."""
        paths = [path for path in found if under(Path(path), self.root)]
        dirs = {str(directory): stat[0] for directory in walked if (stat := file_stat(directory)) is not None}
        ignores = {}
        for ignore in excluder.ignore_files():
            stat = file_stat(ignore)
            ignores[str(ignore)] = list(stat) if stat else None
        if {"dirs": dirs, "ignores": ignores} != self._tree:
            self._tree = {"dirs": dirs, "ignores": ignores}
            self._changed = True
        for path in set(self.modules) - set(paths):
            del self.modules[path]
            self._changed = True
        return paths

    def _index(self, path: Path, stat: Stat | None) -> None:
        try:
            data = path.read_bytes()
        except OSError:
            self.modules.pop(str(path), None)
            self._changed = True
            return
        digest = content_hash(data)
        known = self.modules.get(str(path))
        if known is not None and known.digest == digest:  # same bytes, new stat
            self._keep(path, Module(stat, digest, known.member, known.definitions))
            return
        source = decode_source(data, str(path))
        member = isinstance(source, str) and indexed(source, path, self.config)
        definitions = stream_definitions(source) if member and isinstance(source, str) else frozenset()
        self._keep(path, Module(stat, digest, member, definitions))

    def _keep(self, path: Path, module: Module) -> None:
        trusted = module.stat is not None and time.time_ns() - module.stat[0] > RACY_NS
        self.modules[str(path)] = module if trusted else Module(None, module.digest, module.member, module.definitions)
        self._changed = True

    def save(self) -> None:
        """Replace the index file atomically; one that cannot be written is only a slower next run."""
        if self.file is None or not self._changed:
            return
        modules = {
            path: [list(m.stat) if m.stat else None, m.digest, m.member, sorted(m.definitions)]
            for path, m in self.modules.items()
        }
        document = {"format": FORMAT, "tree": self._tree, "modules": modules}
        try:
            prepare_directory(self.file.parent)
            temporary = self.file.parent / f".{self.file.name}.{os.getpid()}.{time.time_ns()}.tmp"
            try:
                temporary.write_text(json.dumps(document, separators=(",", ":")))
                os.replace(temporary, self.file)
            finally:
                temporary.unlink(missing_ok=True)
        except OSError:
            return
        self._changed = False


def _module(entry: Any) -> Module:
    """Raises TypeError/ValueError on a malformed entry (the whole index is then built again)."""
    stat, digest, member, definitions = entry
    if not (isinstance(digest, str) and isinstance(member, bool) and isinstance(definitions, list)):
        raise TypeError(f"malformed index entry: {entry!r}")
    if not all(isinstance(name, str) for name in definitions):
        raise TypeError(f"malformed index entry: {entry!r}")
    return Module(_stat(stat), digest, member, frozenset(definitions))


def _stat(value: Any) -> Stat | None:
    if value is None:
        return None
    mtime, size = value
    if type(mtime) is not int or type(size) is not int:
        raise TypeError(f"malformed stat: {value!r}")
    return mtime, size


def under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def project_for(paths: Sequence[str], config: Config, persist: bool) -> ProjectIndex | None:
    """The index of the project a run's files belong to; None outside a project (`project_root`)
    or when none of them is the project's: under its root and not left out by `exclude` or
    .gitignore (a file named from an ignored checkout inside it is not linted with its context)."""
    root = project_root(config)
    if root is None:
        return None
    excluder = Excluder(config.root, config.exclude, config.respect_gitignore)
    named = [Path(os.path.abspath(path)) for path in paths]
    if not any(under(path, root) and not is_excluded(path, excluder) for path in named):
        return None
    return ProjectIndex(root, config, persist)


def project_modules(
    project: ProjectIndex,
    discovered: set[str],
    walked: list[Path] | None,
    excluder: Excluder | None,
    parsed: set[str],
    cwd: Path,
) -> dict[str, tuple[IndexedFile, frozenset[str]]]:
    """The project's modules in the index besides the run's `parsed` files, by module name,
    with their top-level names with stream code; `discovered` and `walked`: the run's own walk,
    when it walked the whole project."""
    project.refresh((discovered, walked, excluder) if walked is not None and excluder is not None else None)
    return {
        module_name(display_path(Path(path), cwd)): (IndexedFile(path, module.digest), module.definitions)
        for path, module in project.members()
        if path not in parsed
    }


NO_INDEX: Deps = (("", None, None),)
"""The dependencies of findings worked out without a package index (a run of one file outside
any project): they hold only in another such run."""


class IndexKeys:
    """Between a run's package index and the results cache: the dependencies a file's findings
    keep (`deps`, from what its lint looked up) and whether kept ones hold now (`hold`)."""

    def __init__(self, digests: Mapping[str, str] | None) -> None:
        """`digests`: module name -> content hash of each module in the index; None: no index."""
        self.digests = digests
        self._resolved: dict[str, str | None] = {}

    def deps(self, consulted: Iterable[tuple[str, str | None]]) -> Deps:
        if self.digests is None:
            return NO_INDEX
        return tuple(
            sorted((dotted, module, self.digests.get(module) if module else None) for dotted, module in set(consulted))
        )

    def hold(self, deps: Deps) -> bool:
        if self.digests is None or deps == NO_INDEX:
            return self.digests is None and deps == NO_INDEX
        for dotted, module, digest in deps:
            if dotted not in self._resolved:
                self._resolved[dotted] = resolve(dotted, self.digests)
            if self._resolved[dotted] != module or (module is not None and self.digests.get(module) != digest):
                return False
        return True
