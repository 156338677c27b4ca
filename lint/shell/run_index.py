"""The files of one run as the package index sees them: which it parsed, which it only checked,
how the project index (lint/shell/project.py) and promotion (lint/shell/promote.py) add to them, and the
package index (csan_lint.lint.summaries) they make for the engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from csan_lint.lint.diagnostics import read_text
from csan_lint.lint.model import Finding
from csan_lint.lint.shell.cache import Hit, Stat
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.project import ProjectIndex
from csan_lint.lint.shell.promote import imports_any, stream_definitions
from csan_lint.lint.shell.summary_store import SummaryStore
from csan_lint.lint.summaries import IndexedFile, PackageIndex, module_name

if TYPE_CHECKING:
    from csan_lint.lint.shell.runner import Job


@dataclass(frozen=True)
class CheckedFile:
    """A file whose syntax (only) is checked: the prefilter rejected it, or no rule runs on it."""

    path: Path
    stat: Stat | None
    digest: str
    job: Job


@dataclass
class ParsedFile:
    """A file that passed the prefilter: its findings come from the engine, in this run or (when
    linted with the same package index) from the cache."""

    path: Path
    shown: str
    stat: Stat | None
    digest: str
    source: str | None
    """None for a cache hit, read again only if the package index needs it or it is re-linted."""
    orders: bool
    """Mentions an ordering API: other files' calls into it follow it (it is in the index)."""
    hit: Hit | None = None


def promote_importers(
    parsed: list[ParsedFile],
    checks: list[CheckedFile],
    rejected: list[tuple[Path, str, Stat | None, Hit]],
    findings: list[Finding],
    config: Config,
    others: Mapping[str, tuple[IndexedFile, frozenset[str]]],
) -> int:
    """Files the prefilter rejected (`checks`, this run's; `rejected`, cached) that import a
    module with stream code (of the run, or `others` of the project) go to the engine
    (lint/shell/promote.py); how many were cached."""
    for file in (
        file for file in parsed if file.orders and file.source is None
    ):  # a cache hit: the index reads it anyway
        file.source = read_text(file.path, file.shown)
    modules = {name: definitions for name, (_, definitions) in others.items()}
    modules.update(
        {module_name(f.shown): stream_definitions(f.source) for f in parsed if f.orders and f.source is not None}
    )
    # The text test first: `rules_for` imports every rule (and libcst), which a run that parses
    # nothing never needs.
    for check in [
        c for c in checks if modules and imports_any(c.job.source, c.job.path, modules) and config.rules_for(c.path)
    ]:
        checks.remove(check)
        parsed.append(ParsedFile(check.path, check.job.path, check.stat, check.digest, check.job.source, False))
    promoted = [
        (found, shown, stat, hit, source)
        for found, shown, stat, hit in rejected
        if modules
        and (source := read_text(found, shown)) is not None
        and imports_any(source, shown, modules)
        and config.rules_for(found)
    ]
    for found, shown, stat, hit, source in promoted:
        findings[:] = [finding for finding in findings if all(finding is not old for old in hit.findings)]
        parsed.append(ParsedFile(found, shown, stat, hit.digest, source, False))
    return len(promoted)


def note(
    project: ProjectIndex,
    parsed: list[ParsedFile],
    checks: list[CheckedFile],
    rejected: list[tuple[Path, str, Stat | None, Hit]],
) -> None:
    """Tell the project index what the run read of the project's files."""
    for file in parsed:
        project.note(file.path, file.stat, file.digest, file.source, file.orders)
    for check in checks:
        project.note(check.path, check.stat, check.digest, None, False)
    for found, _, stat, hit in rejected:
        project.note(found, stat, hit.digest, None, False)


def digests(parsed: list[ParsedFile], others: Mapping[str, tuple[IndexedFile, frozenset[str]]]) -> dict[str, str]:
    """Module name -> content hash of every module of the package index."""
    digests = {name: file.digest for name, (file, _) in others.items()}
    digests.update({module_name(file.shown): file.digest for file in parsed if file.orders})
    return digests


def package_index(
    parsed: list[ParsedFile], others: Mapping[str, tuple[IndexedFile, frozenset[str]]], store: SummaryStore | None
) -> PackageIndex:
    """The run's parsed files that mention an ordering API, in hand (a cached one's text is
    added when `_engine_jobs` reads it), and the project's other modules, read on first use."""
    sources = {module_name(file.shown): file.source for file in parsed if file.orders and file.source is not None}
    files = {name: file for name, (file, _) in others.items()}
    for file in parsed:
        if file.orders and file.source is None:
            files[module_name(file.shown)] = IndexedFile(str(file.path), file.digest)
    return PackageIndex(sources, files, store)
