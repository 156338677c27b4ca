"""The language server's projects: the project index of each, built once and kept in memory
across requests, one module updated when the editor changes it, and the open files that looked
that module up linted again (a type checker's daemon, not a batch job).

An edited buffer's text stands for its module in the index until the editor closes it (then
the file on disk does again), so that an importer sees the helper as it is being written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from csan_lint.lint.diagnostics import read_text
from csan_lint.lint.model import Finding
from csan_lint.lint.shell.cache import CACHE_DIR_NAME, analysis_key
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import display_path
from csan_lint.lint.shell.project import PROJECT_MARKERS, indexed, project_for, project_modules
from csan_lint.lint.shell.promote import stream_definitions
from csan_lint.lint.shell.runner import lint_text
from csan_lint.lint.shell.summary_store import SummaryStore
from csan_lint.lint.summaries import PackageIndex, module_name


@dataclass
class _Project:
    config: Config
    package: PackageIndex
    definitions: dict[str, frozenset[str]]
    """Module -> its top-level names with stream code (promotion of importers, lint/shell/promote.py)."""
    looked_up: dict[str, set[str]] = field(default_factory=dict)
    """Open file -> the modules its last lint resolved a lookup to."""


class Workspace:
    """The projects of the files an editor has open, by project root."""

    def __init__(self) -> None:
        self._projects: dict[Path, _Project] = {}

    def lint(self, path: Path, source: str, config: Config) -> list[Finding]:
        """`source` linted as the file at `path`, with the rest of its project as context; its
        text becomes its module's in the index."""
        if config.source is None:  # no config file: the project is the file's, not the editor's directory
            root = next((d for d in path.parents if any((d / m).exists() for m in PROJECT_MARKERS)), None)
            config = replace(config, root=root) if root is not None else config
        project = self._project(path, config)
        if project is None:
            return lint_text(source, path, config).findings
        self._set(project, path, source)
        findings = lint_text(source, path, config, project.package, project.definitions).findings
        project.looked_up[str(path)] = {module for _, module in project.package.consulted if module is not None}
        return findings

    def dependents(self, path: Path) -> list[Path]:
        """The other open files of the project whose last lint looked up the module at `path`."""
        project = next((p for root, p in self._projects.items() if root in path.parents), None)
        if project is None:
            return []
        name = module_name(display_path(path))
        return [Path(other) for other, modules in project.looked_up.items() if name in modules and other != str(path)]

    def closed(self, path: Path) -> None:
        """The editor closed `path`: its module is the file on disk again."""
        for root, project in self._projects.items():
            if root in path.parents:
                project.looked_up.pop(str(path), None)
                source = read_text(path, display_path(path))
                self._set(project, path, source)

    def _project(self, path: Path, config: Config) -> _Project | None:
        index = project_for([str(path)], config, persist=True)
        if index is None:
            return None
        known = self._projects.get(index.root)
        if known is not None and known.config == config:
            return known
        others = project_modules(index, set(), None, None, set(), Path.cwd())
        index.save()
        store = SummaryStore(index.root / CACHE_DIR_NAME / f"summaries-{analysis_key()}")
        files = {name: file for name, (file, _) in others.items()}
        project = _Project(config, PackageIndex({}, files, store), {name: defs for name, (_, defs) in others.items()})
        self._projects[index.root] = project
        return project

    def _set(self, project: _Project, path: Path, source: str | None) -> None:
        name = module_name(display_path(path))
        member = source is not None and indexed(source, path, project.config)
        project.package.update(name, source if member else None)
        if member and source is not None:
            project.definitions[name] = stream_definitions(source)
        else:
            project.definitions.pop(name, None)
