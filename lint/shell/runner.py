"""Lint many files: discover, consult the cache, read, prefilter, run the engine (in a process
pool when there is enough to parse), apply suppressions. Every failure stays local to its file as
a diagnostic.

Start-up matters (pre-commit runs this on one or two files): libcst, the rules and the process
pool are imported only when a file actually needs parsing.

Public API: `lint_paths(paths, config) -> LintResult`; `lint_text` for one buffer (stdin, an
editor's unsaved text) linted as the file it will be.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.diagnostics import (
    BUDGET_CODE,
    DIAGNOSTIC_NAMES,
    INTERNAL_ERROR_CODE,
    MAX_PARSE_CHARS,
    READ_ERROR_CODE,
    TOOL_ERROR_CODES,
    decode_source,
    diagnostic,
    read_bytes,
    too_large,
)
from csan_lint.lint.model import NO_SPELLINGS, Finding, Spellings
from csan_lint.lint.registry import SYNTAX_ERROR_CODE, all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts
from csan_lint.lint.shell.budget import BudgetExceeded, collector_paused, cpu_budget
from csan_lint.lint.shell.cache import CACHE_DIR_NAME, Hit, ResultCache, Stat, analysis_key, content_hash, file_stat
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import Excluder, PathError, discover, display_path, might_have_findings
from csan_lint.lint.shell.pool import Dealt, started_pool
from csan_lint.lint.shell.project import IndexKeys, project_for, project_modules
from csan_lint.lint.shell.promote import imports_any
from csan_lint.lint.shell.run_index import CheckedFile, ParsedFile, digests, note, package_index, promote_importers
from csan_lint.lint.shell.staging import StagedLint, finding_order
from csan_lint.lint.shell.summary_store import SummaryStore
from csan_lint.lint.shell.suppress import (
    UNUSED_NOQA_CODE,
    UNUSED_NOQA_NAME,
    filter_suppressed,
    skips_file,
    unused_suppressions,
)
from csan_lint.lint.summaries import IndexedFile, PackageIndex, may_order
from csan_lint.lint.syntax import python_syntax_error

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

PARALLEL_MIN_BYTES = 128 * 1024
"""Below this much source to parse, starting worker processes costs more than it saves."""
SYNTAX_CHECK_SHARE = 50
"""CPython checks the syntax of a file about this many times faster than libcst parses and the
engine analyses it (0.13 s against ~8 s of CPU per MB): how a syntax-only job weighs in the
decision to start worker processes and in dealing them out."""
ANALYSIS_BUDGET_S = 60.0
"""CPU seconds one file's parse and analysis may take (the largest file PyTorch parses takes
about 2 s): past it the file gets a `BUDGET_CODE` diagnostic and the run goes on."""


@dataclass(frozen=True)
class LintResult:
    findings: list[Finding]
    """Sorted by path, line, column, code."""
    files_checked: int
    """Files found and read (a file skipped by the prefilter counts: it was checked)."""
    files_parsed: int
    """Files that passed the prefilter: their findings came from the engine (in this run or,
    through the cache, in an earlier one), so a warm run reports what a cold one does."""
    files_cached: int = 0
    """Files whose result came from the cache instead of being read and linted."""
    unreached: frozenset[str] = frozenset()
    """Paths that could not be walked (missing, an unreadable directory): reported as CSL003,
    but no file was checked there."""
    stream_code: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """With `lint_paths(stream_code=True)`: absolute path -> the lines the recognizer calls
    stream code, for the parsed files whose lines came from this run's parse or the cache, and
    none for the files the prefilter rejected (the recognizer would find none there)."""

    @property
    def files_with_findings(self) -> int:
        """Checked files with a finding: never more than `files_checked`."""
        return len({finding.path for finding in self.findings} - self.unreached)

    @property
    def has_tool_errors(self) -> bool:
        return any(finding.code in TOOL_ERROR_CODES for finding in self.findings)


Progress = Callable[[int, int], None]
"""Called with (files linted, files to lint) as the engine's work advances."""


@cache
def rule_names() -> dict[str, str]:
    """Code -> kebab name, for rules, `unused-noqa` and the non-rule diagnostics."""
    return {**DIAGNOSTIC_NAMES, UNUSED_NOQA_CODE: UNUSED_NOQA_NAME, **{rule.code: rule.name for rule in all_rules()}}


@dataclass(frozen=True)
class Job:
    """One file for the engine; picklable (rule classes pickle by reference)."""

    path: str
    source: str
    rules: tuple[type[Rule], ...]
    package: PackageIndex | None = None
    """The other files of the run, for calls into their functions (pickled once per chunk)."""
    unused_noqa: bool = False
    syntax_only: bool = False
    """A file the engine need not see: only its syntax (and, with `unused_noqa`, its
    suppressions) is checked. In the pool too: CPython's parser is most of a cold run's CPU
    once the prefilter has rejected 96% of the files."""
    spellings: Spellings = NO_SPELLINGS
    """The project's own wrappers of the stream API."""
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS
    """The analysis' assumptions switched from their defaults."""
    stream_code: bool = False
    """Also recognize the file's stream code on the same tree (`--confirm` needs it)."""
    observed: ModuleFacts = NO_MODULE_FACTS
    """What test runs saw of the file's functions (`--facts`), that still match its text."""
    later_if_held: bool = False
    """With `stream_code`: a file that holds stream code is not analysed (its outcome is None),
    it is analysed again in the background (lint/shell/staging.py)."""

    @property
    def cost(self) -> int:
        return len(self.source) // SYNTAX_CHECK_SHARE if self.syntax_only else len(self.source)


def lint_source(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None = None,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    observed: ModuleFacts = NO_MODULE_FACTS,
) -> list[Finding]:
    """`csan_lint.lint.engine.lint_source`, imported on first use: the engine pulls in libcst,
    which a run whose files all fail the prefilter (or hit the cache) never needs."""
    from csan_lint.lint.engine import lint_source as engine_lint_source

    return engine_lint_source(source, path, rules, package, spellings, assumptions, observed)


_Outcome = tuple[list[Finding], frozenset[int] | None, frozenset[tuple[str, str | None]]]
"""A job's findings, its stream code lines when it was asked for them (else None), and what it
looked up in the package index (`PackageIndex.consulted`)."""


def _lint_job(job: Job) -> _Outcome | None:
    """The job's outcome; None for a file `later_if_held` holds back."""
    try:
        if job.syntax_only:
            return _unparsed(job.source, job.path, job.rules, job.unused_noqa), None, frozenset()
        if job.package is not None:
            job.package.consulted.clear()
        recognized: frozenset[int] | None = None
        arguments = (job.source, job.path, job.rules, job.package, job.spellings, job.assumptions)
        with cpu_budget(ANALYSIS_BUDGET_S), collector_paused():
            if job.stream_code:
                from csan_lint.lint.engine import lint_unless_stream_code  # libcst: once a file needs parsing

                outcome = lint_unless_stream_code(
                    *arguments, job.observed, stream_code=True, unless_held=job.later_if_held
                )
                if outcome is None:
                    return None
                findings, recognized = outcome
            else:
                findings = lint_source(*arguments, observed=job.observed)
    except BudgetExceeded:
        return [diagnostic(job.path, BUDGET_CODE, _over_budget())], None, frozenset()
    except Exception as error:  # a crash on one file is that file's diagnostic; the run goes on
        return [diagnostic(job.path, INTERNAL_ERROR_CODE, _internal_error(error))], None, frozenset()
    consulted = frozenset(job.package.consulted) if job.package is not None else frozenset()
    if findings and findings[0].code == SYNTAX_ERROR_CODE:
        return findings, recognized, consulted
    kept = filter_suppressed(findings, job.source, rule_names())
    if job.unused_noqa:
        ran = {rule.code for rule in job.rules}
        kept += unused_suppressions(findings, job.source, rule_names(), ran, job.path)
    return sorted(kept, key=lambda finding: (finding.line, finding.column, finding.code)), recognized, consulted


def _unparsed(source: str, shown: str, rules: Sequence[type[Rule]], unused_noqa: bool) -> list[Finding]:
    """The findings of a file the engine does not need to see (the prefilter rejected it, or no
    rule runs on it): a syntax error, else (with `unused_noqa`) suppressions with nothing to do."""
    broken = python_syntax_error(source, shown)
    if broken is not None:
        return [broken]
    if not unused_noqa:
        return []
    return unused_suppressions([], source, rule_names(), {rule.code for rule in rules}, shown)


def _job(source: str, path: Path, shown: str, config: Config) -> Job:
    """The work the file at `path` (absolute) holding `source` needs: the engine's when the
    prefilter passes it and a rule runs on it, else a syntax check. The rules (and libcst with
    them) are imported only when the prefilter passes or `unused-noqa` is on."""
    unused_noqa = config.reports_unused_noqa(path)
    engine = might_have_findings(source, config.spellings.leaves()) and bool(config.rules_for(path))
    rules = config.rules_for(path) if engine or unused_noqa else ()
    return Job(
        shown,
        source,
        rules,
        None,
        unused_noqa,
        syntax_only=not engine,
        spellings=config.spellings,
        assumptions=config.assumptions,
        observed=config.observed(shown, source),
    )


def lint_text(
    source: str,
    path: Path,
    config: Config,
    package: PackageIndex | None = None,
    definitions: Mapping[str, frozenset[str]] | None = None,
) -> LintResult:
    """`source` linted as the file at `path` (absolute; it need not exist) would be: the same
    prefilter, rules, `per-file-ignores` and suppressions. No cache; other files only through
    `package` (the language server's project index, lint/shell/workspace.py), a file that imports
    one of `definitions` (module -> its names with stream code) passing the prefilter as in a run."""
    shown = display_path(path)
    if skips_file(source):
        return LintResult([], 1, 0)
    job = replace(_job(source, path, shown, config), package=package)
    if job.syntax_only and definitions and imports_any(source, shown, definitions) and config.rules_for(path):
        job = replace(job, syntax_only=False, rules=config.rules_for(path))
    if not job.syntax_only and len(source) > MAX_PARSE_CHARS:
        return LintResult([diagnostic(shown, READ_ERROR_CODE, too_large(len(source)))], 1, 0)
    outcome = _lint_job(job)
    assert outcome is not None  # only `later_if_held` holds a file back
    return LintResult(outcome[0], 1, 0 if job.syntax_only else 1)


def _over_budget() -> str:
    return (
        f"analysis budget exceeded: more than {ANALYSIS_BUDGET_S:g} s of CPU time on this file, left "
        "unchecked (generated code? exclude it, or split the file)"
    )


def _internal_error(error: Exception) -> str:
    """The exception and where it was raised: enough for a bug report, without a traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"internal error: {type(error).__name__}: {error}{where}"


def lint_paths(
    paths: Sequence[str],
    config: Config,
    *,
    jobs: int | None = None,
    cache: bool = False,
    progress: Progress | None = None,
    force_exclude: bool = False,
    stream_code: bool = False,
) -> LintResult:
    """Lint the files and directories in `paths` under `config`.

    `jobs`: worker processes; None picks `os.cpu_count()` when there is enough source to parse,
    else lints in this process. `cache`: reuse and store per-file results in the project's
    `.csan_lint_cache/` (see csan_lint.lint.shell.cache). The result is the same either way.
    `progress`: told how the engine's work (the slow part) advances. `force_exclude`: named
    paths are subject to `exclude` and .gitignore too. `stream_code`: also give the stream code
    lines of the parsed files, recognized on the engine's own tree (`LintResult.stream_code`).
    """
    staged = lint_in_stages(
        paths, config, jobs=jobs, cache=cache, progress=progress, force_exclude=force_exclude, stream_code=stream_code
    )
    with staged:
        return staged.result()


def lint_in_stages(
    paths: Sequence[str],
    config: Config,
    *,
    jobs: int | None = None,
    cache: bool = False,
    progress: Progress | None = None,
    force_exclude: bool = False,
    stream_code: bool = False,
    checks_later: bool = False,
) -> StagedLint:
    """`lint_paths`, whose slow parts go on in the background with `checks_later` when there is
    enough to pay for worker processes (lint/shell/staging.py): the syntax checks of the files the
    prefilter rejected and, with `stream_code`, the analyses of the files that hold stream code.
    `StagedLint.first` is ready without them (`--confirm` starts its tests on it), `result()`
    waits for them."""
    cwd = Path.cwd()
    excluder = Excluder(config.root, config.exclude, config.respect_gitignore)
    results = ResultCache(config.root, config) if cache else None
    findings: list[Finding] = []
    recognized: dict[str, frozenset[int]] = {}
    parsed: list[ParsedFile] = []
    checks: list[CheckedFile] = []
    rejected: list[tuple[Path, str, Stat | None, Hit]] = []  # by the prefilter, cached
    files_checked = files_cached = 0
    unreached: set[str] = set()
    early: ProcessPoolExecutor | None = None  # --confirm's workers, started once there is enough to parse
    project = project_for(paths, config, cache)
    walked: list[Path] | None = [] if project is not None and str(project.root) in map(os.path.abspath, paths) else None
    discovered: set[str] = set()
    for found in discover(paths, excluder, force_exclude, walked=walked):
        if isinstance(found, PathError):
            unreached.add(display_path(found.path, cwd))
            findings.append(diagnostic(display_path(found.path, cwd), READ_ERROR_CODE, found.message))
            continue
        files_checked += 1
        discovered.add(str(found))
        shown = display_path(found, cwd)
        # Stat before reading: a file changed after the stat then has a newer stat than the
        # bytes hashed, so the next run re-reads it instead of trusting a stale entry.
        stat = file_stat(found) if results is not None or project is not None else None
        hit = results.lookup(found, shown, stat) if results is not None else None
        data: bytes | Finding = b""
        digest = ""
        if hit is None:
            data = read_bytes(found, shown)
            if (results is not None or project is not None) and isinstance(data, bytes):
                digest = content_hash(data)
                hit = results.lookup(found, shown, stat, digest) if results is not None else None
        if hit is not None and not hit.parsed:
            files_cached += 1
            rejected.append((found, shown, stat, hit))
            findings.extend(hit.findings)  # the prefilter rejected these bytes: what their check said
            if stream_code and config.rules_for(found):  # rejected by the prefilter, not for want of rules
                recognized[str(found)] = frozenset()
            continue
        if hit is not None:
            parsed.append(ParsedFile(found, shown, stat, hit.digest, None, hit.orders, hit))
            continue
        source = decode_source(data, shown) if isinstance(data, bytes) else data
        if isinstance(source, Finding):
            findings.append(source)
            if results is not None:
                results.drop(found)
            continue
        if skips_file(source):
            if results is not None:
                results.store(found, stat, [], parsed=False, digest=digest)
            continue
        job = _job(source, found, shown, config)
        if job.syntax_only:
            checks.append(CheckedFile(found, stat, digest, job))
            if stream_code and config.rules_for(found):  # rejected by the prefilter: no stream code either
                recognized[str(found)] = frozenset()
            continue
        if len(source) > MAX_PARSE_CHARS:
            findings.append(diagnostic(shown, READ_ERROR_CODE, too_large(len(source))))
            continue
        parsed.append(ParsedFile(found, shown, stat, digest, source, may_order(source)))
        if early is None and checks_later and stream_code and (jobs is None or jobs > 1):
            if sum(len(file.source or "") for file in parsed) >= PARALLEL_MIN_BYTES:
                early = started_pool(jobs or os.cpu_count() or 1, "csan_lint.lint.engine")
    others: dict[str, tuple[IndexedFile, frozenset[str]]] = {}
    if project is not None:
        note(project, parsed, checks, rejected)
        others = project_modules(project, discovered, walked, excluder, {str(file.path) for file in parsed}, cwd)
    files_cached -= promote_importers(parsed, checks, rejected, findings, config, others)
    # Calls into functions imported from other modules are followed, so a parsed file's cached
    # findings hold only while the modules they looked up are the same (csan_lint.lint.shell.cache).
    keys = IndexKeys(digests(parsed, others) if len(parsed) > 1 or others else None)
    stale = [file for file in parsed if file.hit is None or not keys.hold(file.hit.deps)]
    for file in parsed:
        if file not in stale and file.hit is not None:
            findings.extend(file.hit.findings)
            files_cached += 1
            if stream_code and file.hit.stream_code is not None:
                recognized[str(file.path)] = file.hit.stream_code
    costs = [check.job.cost for check in checks] + [len(file.source or "") for file in stale if stream_code]
    workers = _background_workers(costs, jobs) if checks_later else 0
    store = SummaryStore(config.root / CACHE_DIR_NAME / f"summaries-{analysis_key()}") if cache else None
    package = package_index(parsed, others, store) if keys.digests is not None else None
    unreadable, stale, work = _engine_jobs(stale, parsed, package, config, stream_code, later_if_held=workers > 0)
    findings.extend(unreadable)
    later, checks = (checks, []) if workers else ([], checks)
    deferred: list[tuple[ParsedFile, Job]] = []
    if work or checks:  # `early` started for some of `work`
        outcomes = _run([*work, *(check.job for check in checks)], jobs, progress, early)
        now_findings, now_lines = _kept(stale, outcomes, results, keys)
        findings.extend(now_findings)
        recognized.update(now_lines)
        deferred = [(file, job) for file, job, outcome in zip(stale, work, outcomes, strict=False) if outcome is None]
        for check, outcome in zip(checks, outcomes[len(work) :], strict=True):
            assert outcome is not None  # a syntax check is never held back
            findings.extend(outcome[0])
            _store_check(results, check, outcome[0])
    findings.sort(key=finding_order)
    first = LintResult(findings, files_checked, len(parsed), files_cached, frozenset(unreached), recognized)
    background_jobs = [*(replace(job, later_if_held=False) for _, job in deferred), *(check.job for check in later)]
    background = _dealt(background_jobs, workers, background=True) if background_jobs else None

    def finish(outcomes: list[_Outcome | None]) -> tuple[list[Finding], dict[str, frozenset[int]]]:
        late_findings, late_lines = _kept([file for file, _ in deferred], outcomes, results, keys)
        for check, outcome in zip(later, outcomes[len(deferred) :], strict=True):
            assert outcome is not None
            late_findings.extend(outcome[0])
            _store_check(results, check, outcome[0])
        if results is not None:
            results.save()
        if project is not None:
            project.save()
        return late_findings, late_lines

    analysing = frozenset(str(file.path) for file, _ in deferred)
    return StagedLint(first, background, finish, analysing=analysing, checking=len(later))


def _background_workers(costs: Sequence[int], jobs: int | None) -> int:
    """Worker processes for jobs run in the background: one core is left to the caller (the
    tests `--confirm` starts meanwhile); 0 (run them now, in this process) when there is too
    little to do to pay for starting them, or `jobs` asks for no worker process."""
    if (jobs is not None and jobs <= 1) or sum(costs) < PARALLEL_MIN_BYTES:
        return 0
    return max(1, (jobs or os.cpu_count() or 1) - 1)


def _engine_jobs(
    stale: list[ParsedFile],
    parsed: list[ParsedFile],
    package: PackageIndex | None,
    config: Config,
    stream_code: bool,
    later_if_held: bool = False,
) -> tuple[list[Finding], list[ParsedFile], list[Job]]:
    """The engine's jobs for the parsed files without a valid cached result, with `package`
    (its parsed files that mention an ordering API are read again for it when cached): the
    unreadable files' diagnostics, the files still to lint and their jobs (`later_if_held`:
    `Job.later_if_held`, with `stream_code`)."""
    findings: list[Finding] = []
    for file in parsed:
        if file.source is None and (file.orders or file in stale):
            data = read_bytes(file.path, file.shown)
            source = decode_source(data, file.shown) if isinstance(data, bytes) else data
            if isinstance(source, Finding):  # gone or changed since the stat: say so, lint the rest
                findings.append(source)
                stale = [other for other in stale if other is not file]
                continue
            file.source = source
    work = [
        Job(
            file.shown,
            file.source or "",
            config.rules_for(file.path),
            package,
            config.reports_unused_noqa(file.path),
            spellings=config.spellings,
            assumptions=config.assumptions,
            stream_code=stream_code,
            observed=config.observed(file.shown, file.source or ""),
            later_if_held=stream_code and later_if_held,
        )
        for file in stale
    ]
    return findings, stale, work


def _kept(
    files: list[ParsedFile], outcomes: Sequence[_Outcome | None], results: ResultCache | None, keys: IndexKeys
) -> tuple[list[Finding], dict[str, frozenset[int]]]:
    """The findings and stream code lines (absolute path -> lines) of the engine's `outcomes`
    for `files` (the first outcomes; a file held back has none yet), stored in the cache."""
    findings: list[Finding] = []
    recognized: dict[str, frozenset[int]] = {}
    for file, outcome in zip(files, outcomes, strict=False):  # other jobs' outcomes may follow
        if outcome is None:
            continue
        file_findings, lines, consulted = outcome
        findings.extend(file_findings)
        if lines is not None:
            recognized[str(file.path)] = lines
        if results is None:
            continue
        if any(finding.code in TOOL_ERROR_CODES for finding in file_findings):
            results.drop(file.path)  # a crash, a killed worker, a budget run out: no result to keep
        else:
            results.store(
                file.path,
                file.stat,
                file_findings,
                parsed=True,
                digest=file.digest,
                orders=file.orders,
                deps=keys.deps(consulted),
                stream_code=lines,
            )
    return findings, recognized


def _store_check(results: ResultCache | None, check: CheckedFile, findings: list[Finding]) -> None:
    if results is not None and not any(finding.code in TOOL_ERROR_CODES for finding in findings):
        results.store(check.path, check.stat, findings, parsed=False, digest=check.digest)


def _run(
    work: list[Job], jobs: int | None, progress: Progress | None = None, pool: ProcessPoolExecutor | None = None
) -> list[_Outcome | None]:
    """Every job's outcome: in this process, or in worker processes when there is enough to do
    (`pool`: processes started already, used and shut down)."""
    report = progress or (lambda done, total: None)
    if pool is not None:
        workers = jobs or os.cpu_count() or 1
        return Dealt(_lint_chunk, work, [job.cost for job in work], workers, _worker_failed, pool=pool).results(report)
    if jobs is None:
        enough = len(work) > 1 and sum(job.cost for job in work) >= PARALLEL_MIN_BYTES
        jobs = (os.cpu_count() or 1) if enough else 1
    if jobs <= 1 or len(work) <= 1:
        done: list[_Outcome | None] = []
        for job in work:
            done.append(_lint_job(job))
            report(len(done), len(work))
        return done
    return _dealt(work, jobs).results(report)


def _dealt(work: list[Job], workers: int, background: bool = False) -> Dealt[Job, _Outcome | None]:
    return Dealt(_lint_chunk, work, [job.cost for job in work], workers, _worker_failed, background)


def _worker_failed(job: Job, error: Exception) -> _Outcome:
    message = f"internal error: worker process failed: {type(error).__name__}: {error}"
    return [diagnostic(job.path, INTERNAL_ERROR_CODE, message)], None, frozenset()


def _lint_chunk(chunk: list[Job]) -> list[_Outcome | None]:
    return [_lint_job(job) for job in chunk]
