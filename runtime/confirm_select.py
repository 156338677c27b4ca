"""Which tests `--confirm` runs: the test files that import, transitively, a module with stream
code (`stream_code`: what the linter's recognizer calls stream code, wherever it is flagged or not).

A cheap static first filter (`ast` over the test and source files, no import of user code):
it may keep a test that never calls the flagged code (per-test coverage sorts that out later),
but it should not drop one that does. Imports are matched by dotted-name suffix, so where the
tests put the sources on `sys.path` (rootdir, `pythonpath`, a conftest's `sys.path.insert`)
does not matter. Dynamic imports (`importlib.import_module("...")`) are not seen.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import os
import re
import tomllib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.recognize import stream_code_lines
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import Excluder, PathError, discover, display_path, might_have_findings

DEFAULT_TEST_FILES = ("test_*.py", "*_test.py")
_SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".tox", ".nox", ".csan_lint_cache"})


class SelectionError(Exception):
    """Bad test paths or an unreadable pytest configuration: a usage error, exit 2."""


@dataclass(frozen=True)
class PytestConfig:
    """The parts of a project's pytest configuration that selection needs."""

    rootdir: Path
    testpaths: tuple[str, ...] = ()
    python_files: tuple[str, ...] = DEFAULT_TEST_FILES


@dataclass(frozen=True)
class Selection:
    test_files: tuple[str, ...]
    """Test files to run (paths relative to cwd when under it; node ids where only those were
    asked for), sorted: the arguments for pytest."""
    reaching: dict[str, frozenset[str]]
    """Flagged file (real path) -> the selected test files (real paths) that import it."""


def _runs(lines: frozenset[int]) -> list[Span]:
    """Consecutive lines as spans: 3, 4, 5, 9 -> 3-5, 9-9."""
    spans: list[Span] = []
    for line in sorted(lines):
        if spans and spans[-1].end_line == line - 1:
            spans[-1] = Span(spans[-1].start_line, line)
        else:
            spans.append(Span(line, line))
    return spans


Progress = Callable[[int, int], None]
"""Told (files parsed, files to parse) as the recognizer works: (0, total) first."""


@dataclass(frozen=True)
class LaterAnalyses:
    """Files the static pass knows to hold stream code while it still analyses them (`--confirm`
    starts its tests meanwhile: choosing and running them needs only which files to watch)."""

    files: frozenset[str]
    """Absolute paths, as `LintResult.stream_code` has them."""
    result: Callable[[], tuple[Sequence[Finding], Mapping[str, frozenset[int]]]]
    """Waits for the analyses: the static pass's findings and stream code lines, all files'."""


class LateSpans(Mapping[str, list[Span]]):
    """Real path -> the spans watched, where those of the `later` files come when first asked
    for (a test re-run line by line, after a crash); their keys are there at once."""

    def __init__(
        self,
        spans: dict[str, list[Span]],
        later: LaterAnalyses,
        add_findings: Callable[[dict[str, list[Span]], Sequence[Finding]], None],
    ) -> None:
        self._spans = spans
        self._later = later
        self._add_findings = add_findings
        self._waiting = {os.path.realpath(path): path for path in later.files}

    def _resolve(self) -> None:
        findings, lines = self._later.result()
        late = {real: _runs(lines.get(path, frozenset())) for real, path in self._waiting.items()}
        self._add_findings(late, [finding for finding in findings if os.path.realpath(finding.path) in late])
        self._spans.update(late)
        self._waiting = {}

    def __getitem__(self, path: str) -> list[Span]:
        if path in self._waiting:
            self._resolve()
        return self._spans[path]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._spans, **dict.fromkeys(self._waiting)})

    def __len__(self) -> int:
        return len(self._spans.keys() | self._waiting.keys())


def stream_code(
    paths: Sequence[str],
    config: Config,
    progress: Progress | None = None,
    known: Mapping[str, frozenset[int]] | None = None,
    later: Collection[str] = (),
) -> dict[str, list[Span]]:
    """Real path -> spans of stream code, for every file under `paths` that the linter checks
    (its discovery, its excludes, the project's own wrappers of the stream API). Only the files
    the linter's prefilter keeps (`might_have_findings`) can hold any: the others are not parsed
    (on transformers, 784 files say "stream" or "event", 25 pass). `known`: absolute path ->
    lines already recognized on the static pass's own tree (`LintResult.stream_code`, this
    run's parse or its cache); only the rest is parsed here, but for the files in `later`
    (absolute paths the static pass still analyses: their spans are the caller's to add).
    Unreadable files are skipped: the static pass reports them."""
    excluder = Excluder(config.root, config.exclude, config.respect_gitignore)
    wrappers = config.spellings.leaves()
    known = known or {}
    found: dict[str, list[Span]] = {}
    unknown: list[tuple[Path, str]] = []
    for path in discover(paths, excluder):
        if isinstance(path, PathError):
            continue
        lines = known.get(str(path))
        if str(path) in later:
            continue
        if lines is None:
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if might_have_findings(source, wrappers):
                unknown.append((path, source))
        elif lines:
            found[os.path.realpath(path)] = _runs(lines)
    report = progress or (lambda done, total: None)
    report(0, len(unknown))
    for done, (path, source) in enumerate(unknown, start=1):
        lines = stream_code_lines(source, spellings=config.spellings)
        if lines:
            found[os.path.realpath(path)] = _runs(lines)
        report(done, len(unknown))
    return found


def _split(value: str | Sequence[str]) -> tuple[str, ...]:
    return tuple(value.split()) if isinstance(value, str) else tuple(value)


def _read_pytest_config(path: Path) -> PytestConfig | None:
    """The pytest section of one candidate file, None if it has none (pytest's own rules)."""
    try:
        if path.name == "pyproject.toml":
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            options = (table.get("pytest") or {}).get("ini_options", table.get("pytest"))
            if options is None:
                return None
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path, encoding="utf-8")
            section = "tool:pytest" if path.name == "setup.cfg" else "pytest"
            if not parser.has_section(section):
                return None if path.name in ("tox.ini", "setup.cfg") else PytestConfig(path.parent)
            options = dict(parser.items(section))
    except (OSError, ValueError, configparser.Error) as error:
        raise SelectionError(f"{path}: cannot read the pytest configuration: {error}") from error
    return PytestConfig(
        rootdir=path.parent,
        testpaths=_split(options.get("testpaths", ())),
        python_files=_split(options.get("python_files", ())) or DEFAULT_TEST_FILES,
    )


def find_pytest_config(start: Path) -> PytestConfig | None:
    """The configuration pytest would use for tests under `start`: the first directory upwards
    with pytest.ini, .pytest.ini, a pyproject.toml with [tool.pytest...], tox.ini [pytest] or
    setup.cfg [tool:pytest]."""
    for directory in (start, *start.parents):
        for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            candidate = directory / name
            if candidate.is_file():
                config = _read_pytest_config(candidate)
                if config is not None:
                    return config
    return None


def _common_directory(paths: Sequence[str]) -> Path:
    directories = [
        str(Path(path).resolve() if Path(path).is_dir() else Path(path).resolve().parent) for path in paths
    ] or [os.getcwd()]
    return Path(os.path.commonpath(directories))


_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "pytest.ini")


def _project_root(start: Path) -> Path | None:
    """The first directory upwards with a project file, where pytest puts its rootdir when no
    file configures it: a src layout's `tests/` sits there, beside `src/`, not next to the
    package."""
    return next((d for d in (start, *start.parents) if any((d / n).is_file() for n in _PROJECT_FILES)), None)


def default_test_paths(source_paths: Sequence[str]) -> tuple[list[str], PytestConfig | None]:
    """pytest's configured `testpaths` for the linted sources, else `tests/` next to the sources,
    the config or the project root; empty when there is none."""
    start = _common_directory(source_paths)
    config = find_pytest_config(start)
    if config is not None and config.testpaths:
        return [str(config.rootdir / path) for path in config.testpaths], config
    root = config.rootdir if config is not None else _project_root(start)
    for directory in (start, *(() if root is None else (root,))):
        if (directory / "tests").is_dir():
            return [str(directory / "tests")], config
    return [], config


def _walk(root: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            name
            for name in subdirs
            if name not in _SKIP_DIRS
            and not name.startswith(".")
            and not (Path(directory, name) / "pyvenv.cfg").exists()
        )
        yield from (Path(directory, name) for name in sorted(files) if name.endswith(".py"))


def _python_files(paths: Iterable[str]) -> Iterator[Path]:
    for path in paths:
        candidate = Path(path)
        if candidate.is_dir():
            yield from _walk(candidate)
        elif candidate.suffix == ".py" and candidate.is_file():
            yield candidate


def discover_test_files(test_paths: Sequence[str], patterns: Sequence[str]) -> dict[Path, frozenset[str]]:
    """Test files under the test paths (real paths; files given explicitly are always tests),
    each with the node ids asked for in it (`tests/test_a.py::test_x`); empty: the whole file."""
    found: dict[Path, frozenset[str]] = {}
    for path in test_paths:
        file_part, node_separator, _ = path.partition("::")
        if not os.path.exists(file_part):
            raise SelectionError(f"test path {file_part} does not exist")
        if os.path.isfile(file_part):
            key = Path(os.path.realpath(file_part))
            if not node_separator:
                found[key] = frozenset()  # the whole file covers any of its node ids
            elif key not in found or found[key]:
                found[key] = found.get(key, frozenset()) | {path}
            continue
        for candidate in _walk(Path(file_part)):
            if any(fnmatch.fnmatch(candidate.name, pattern) for pattern in patterns):
                found[Path(os.path.realpath(candidate))] = frozenset()
    return found


def _module_names(path: Path) -> Iterator[str]:
    """Every dotted name the file could be imported as, from the bare module upwards."""
    parts = list(path.parts[1:-1]) + ([] if path.name == "__init__.py" else [path.stem])
    for start in range(len(parts) - 1, -1, -1):
        yield ".".join(parts[start:])


_LINE = rb"(?:[^\n\\]|\\(?s:.))*"
"""The rest of a logical line: a backslash joins the next physical line."""
_IMPORT_STATEMENT = re.compile(
    rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\((?:[^)#]|#[^\n]*)*\)|" + _LINE + rb")"
    rb"|import[ \t]+" + _LINE + rb")",
    re.M,
)
"""Import statements at any indentation (parenthesised lists included, with comments inside
them skipped whole, so a `)` in a comment does not end the list; backslash continuations too).
Matching text rather than parsing whole files keeps selection cheap on big trees (torch: 23 s
to parse, under 2 s this way); a match inside a string only adds a name: selection may
over-approximate, which per-test coverage then corrects."""


def _import_nodes(source: bytes) -> Iterator[ast.stmt]:
    statements = [match.group(0).strip() for match in _IMPORT_STATEMENT.finditer(source)]
    try:
        yield from ast.parse(b"\n".join(statements)).body
    except (SyntaxError, ValueError):  # one bad match (prose in a docstring): the rest still count
        for statement in statements:
            try:
                yield from ast.parse(statement).body
            except (SyntaxError, ValueError):
                continue


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """Absolute module names this file imports (with their parent packages) and the files its
    relative imports name (as strings: on a big package, pathlib's objects cost more than the
    reading)."""
    try:
        source = path.read_bytes()
    except OSError:
        return set(), set()
    names: set[str] = set()
    relative: set[str] = set()
    for node in _import_nodes(source):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = os.path.dirname(path)
            for _ in range(node.level - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *node.module.split(".")) if node.module else base
            for target in [stem] + [os.path.join(stem, alias.name) for alias in node.names]:
                relative.update((target + ".py", os.path.join(target, "__init__.py")))
            continue
        else:
            continue
        for module in modules:
            pieces = module.split(".")
            names.update(".".join(pieces[: i + 1]) for i in range(len(pieces)))
    return names, relative


def _conftests(test_file: Path, stop: Path) -> Iterator[Path]:
    """conftest.py files pytest loads for this test file, from its directory up to `stop`."""
    for directory in test_file.parents:
        candidate = directory / "conftest.py"
        if candidate.is_file():
            yield candidate
        if directory == stop or stop not in directory.parents:
            return


class _RealPaths:
    """`os.path.realpath` of many files: each directory is resolved once for all its files (a
    file that is a link is resolved itself). On transformers, 5 s of the selection this way."""

    def __init__(self) -> None:
        self._directories: dict[str, str] = {}

    def __call__(self, path: Path) -> Path:
        directory, name = os.path.split(path)
        real = self._directories.get(directory)
        if real is None:
            real = self._directories[directory] = os.path.realpath(directory)
        joined = os.path.join(real, name)
        return Path(os.path.realpath(joined) if os.path.islink(joined) else joined)


def select_tests(
    flagged_files: Iterable[str],
    test_paths: Sequence[str],
    source_paths: Sequence[str],
    patterns: Sequence[str] = DEFAULT_TEST_FILES,
    *,
    all_tests: bool = False,
) -> Selection:
    """The test files that reach a watched file (stream code, findings) through imports (their
    own or their conftests'), and for each watched file the test files that reach it.
    `all_tests`: every test file is selected, whatever it imports."""
    flagged = {Path(os.path.realpath(path)) for path in flagged_files}
    asked = discover_test_files(test_paths, patterns)
    tests = list(asked)
    stop = _common_directory([*test_paths, *source_paths])
    real_path = _RealPaths()
    universe = {real_path(path) for path in _python_files([*source_paths, *test_paths])}
    universe |= flagged | set(tests)
    known = {str(path): path for path in universe}
    for test in tests:
        universe.update(_conftests(test, stop))
    by_name: dict[str, set[Path]] = {}
    for path in universe:
        for name in _module_names(path):
            by_name.setdefault(name, set()).add(path)
    edges: dict[Path, set[Path]] = {}

    def imported_by(path: Path) -> set[Path]:
        """Files of the universe that `path` imports; read only when a test reaches `path`."""
        if path not in edges:
            names, relative = _imports(path)
            edges[path] = {target for name in names for target in by_name.get(name, ())}
            edges[path].update(known[target] for target in relative if target in known)
        return edges[path]

    reaching: dict[str, set[str]] = {str(path): set() for path in flagged}
    selected: list[str] = []
    for test in tests:
        seen: set[Path] = set()
        unseen = set(flagged)  # once every watched file is reached, the rest of the walk changes nothing
        pending = [test, *_conftests(test, stop)]
        while pending and unseen:
            current = pending.pop()
            if current not in seen:
                seen.add(current)
                unseen.discard(current)
                pending.extend(imported_by(current))
        hit = seen & flagged
        for path in hit:
            reaching[str(path)].add(str(test))
        if hit or all_tests:
            selected.extend(asked[test] or [display_path(test)])
    return Selection(
        test_files=tuple(sorted(set(selected))),
        reaching={path: frozenset(files) for path, files in reaching.items()},
    )
