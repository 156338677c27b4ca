"""Which files to lint: path walking with .gitignore and `exclude`, and the text prefilter.

Discovery is cheap I/O; the prefilter is one pass of a few regexes over the text so that the
expensive libcst parse only runs on files that could hold a stream bug (about 4% of PyTorch).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from csan_lint.lint.analysis import api


def _alternatives(words: Iterable[str]) -> str:
    """A non-capturing group of `words`, longest first."""
    return "(?:" + "|".join(sorted(map(re.escape, words), key=lambda word: (-len(word), word))) + ")"


SKIPPED_DIR_NAMES = frozenset({".git", ".hg", ".svn", "__pycache__", ".csan_lint_cache", ".tox", ".nox"})
"""Never descended into, whatever the ignore files say. Virtual environments (a `pyvenv.cfg`
inside) are skipped too, whatever their name."""

_API = _alternatives(api.stream_code_words())
"""The stream API's last names (and its modules': `streams`, `graphs`), from the table."""
_CUDA_API = re.compile(r"cuda\s*\.\s*" + _API + r"\b")
"""`torch.cuda.stream`, `cuda.Event` (after `from torch import cuda`), `torch.cuda.graphs.graph`."""
_CUDA_ALIAS = (
    re.compile(r"from(?<![^ \t\n]from)[ \t]+torch(?:\.cuda\b|[ \t]+import\b[^\n]*\bcuda\b)"),
    re.compile(r"import(?<![^ \t\n]import)[ \t]+torch\.cuda\b[^\n]*\bas\b"),
)
"""Imports after which the API may be spelled without `cuda.`: `from torch.cuda import stream as
s_ctx`, `import torch.cuda as tc` (then `tc.Stream`), `from torch import cuda as c`.

Each pattern here starts with a literal, the only start CPython's regex engine skips ahead to
(a leading `\b` or `^` makes it try every position: 3 to 4 times slower); alternatives are
separate patterns, as `a...|b...` has no literal start either (the prefilter took twice as
long). A lookbehind after the word takes the place of `\b` in front of it;
`(?<![^ \t\n]from)` allows `from` at the start of a statement, a little more than
`^[ \t]*from` (after `; ` too): a prefilter may keep more."""
_API_WORD = re.compile(r"\b" + _API + r"\b")
_GENERIC_API = (
    re.compile(r"torch(?<!\wtorch)\s*\.\s*" + _alternatives(api.GENERIC_CLASSES) + r"\s*\("),
    re.compile(r"accelerator(?<!\waccelerator)\s*\.\s*" + _API + r"\b"),
    re.compile(r"get_device_module(?<!\wget_device_module)\s*\([^()]*\)\s*\.\s*" + _API + r"\b"),
    re.compile(r"getattr(?<!\wgetattr)\s*\(\s*torch\s*,[^()]*\)\s*\.\s*" + _API + r"\b"),
)
"""The device-generic spellings: `torch.Stream()`, `torch.Event()` (made here: a mere annotation
passes a stream made elsewhere), `torch.accelerator.current_stream`, `get_device_module(d).Stream`,
`getattr(torch, self.device).stream(s)`."""
_GENERIC_ALIAS = (
    re.compile(r"get_accelerator(?<!\wget_accelerator)\b"),
    re.compile(r"=\s*torch\s*\.\s*get_device_module\b"),
    re.compile(
        r"from(?<![^ \t\n]from)[ \t]+torch(?:\.accelerator)?[ \t]+import\b[^\n]*"
        r"\b" + _alternatives(api.generic_words() | {"accelerator"}) + r"\b"
    ),
)
"""An accelerator object (DeepSpeed's `get_accelerator()`, `torch.get_device_module()`), after which
`accel.Stream()` needs no `torch` in front, and imports of the generic names."""
_GENERIC_NEEDS = tuple(sorted(api.generic_words() | {"accelerator", "get_device_module", "getattr"}))
"""Text that either generic pattern needs to match: substring checks first."""
_NON_BLOCKING = re.compile(api.NON_BLOCKING + r"\s*=\s*(?!False\b)")
"""Any non-blocking copy that is not spelled off; it needs no `cuda` in the file (the tensor may
arrive as an argument)."""
_STREAM_HANDLE = re.compile(r"\." + api.STREAM_HANDLE + r"\b")
"""A stream's raw handle read (`s.cuda_stream`): work launched on it by code the linter cannot
read; the stream may arrive as an argument."""


_STRING_OR_COMMENT = re.compile(
    r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""'
    r"|'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    r"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"
    r"|#[^\n]*",
    re.DOTALL,
)
"""A string literal or a comment, leftmost first, as Python's tokenizer reads them (a `#` or a
quote inside a string is the string's). An unterminated one matches nothing and stays code."""


def might_have_findings(text: str, wrappers: frozenset[str] = frozenset()) -> bool:
    """False only for text whose code (strings and comments aside) cannot hold a stream bug: no
    torch.cuda or device-generic stream, event or graph API however imported or reached, no call
    of a project wrapper (by its last name, `wrappers`), no non-blocking copy and no stream's raw
    handle.

    The whole text is tried first; only a file that passes has its strings and comments blanked
    and is tried again: docs, code generators that write `torch.Event()` into the code they emit,
    and comments about streams hold no stream code."""
    return _mentions_stream_api(text, wrappers) and _mentions_stream_api(_STRING_OR_COMMENT.sub('""', text), wrappers)


def _mentions_stream_api(text: str, wrappers: frozenset[str]) -> bool:
    """Substring checks first keep it cheap."""
    if api.NON_BLOCKING in text and _NON_BLOCKING.search(text):
        return True
    if api.STREAM_HANDLE in text and _STREAM_HANDLE.search(text):
        return True
    if wrappers and any(word in text for word in wrappers):
        if re.search(r"\b(?:" + "|".join(map(re.escape, sorted(wrappers))) + r")\b", text):
            return True
    if "cuda" in text and (_CUDA_API.search(text) or (_finds(_CUDA_ALIAS, text) and _API_WORD.search(text))):
        return True
    if "accelerator" not in text and "torch" not in text and "get_device_module" not in text:
        return False
    if not any(word in text for word in _GENERIC_NEEDS):
        return False
    return _finds(_GENERIC_API, text) or (_finds(_GENERIC_ALIAS, text) and bool(_API_WORD.search(text)))


def _finds(patterns: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(pattern.search(text) for pattern in patterns)


@dataclass(frozen=True)
class PathError:
    """A path that cannot be walked (a missing argument, an unreadable directory): reported as a
    diagnostic on that path while the others are linted."""

    path: Path
    message: str


def is_virtualenv(directory: Path) -> bool:
    """os.path, not Path.is_file: inside a directory the user may not search (mode 0o600 to a
    non-root user) the stat raises PermissionError, which Path.is_file lets through."""
    return os.path.isfile(directory / "pyvenv.cfg")


def find_repo_root(start: Path) -> Path | None:
    """The nearest ancestor (or `start`) holding `.git`: where git starts reading .gitignore."""
    for candidate in (start, *start.parents):
        if os.path.exists(candidate / ".git"):  # os.path: False, not PermissionError, when unsearchable
            return candidate
    return None


@dataclass(frozen=True)
class _IgnoreFile:
    """The patterns of one .gitignore, which apply to paths relative to its directory."""

    base: Path
    spec: pathspec.GitIgnoreSpec

    def verdict(self, path: Path, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by a `!pattern`, None: no pattern here matches."""
        try:
            relative = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        return self.spec.check_file(relative + "/" if is_dir else relative).include


def _read_gitignore(directory: Path) -> _IgnoreFile | None:
    gitignore = directory / ".gitignore"
    try:
        lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return _IgnoreFile(directory, pathspec.GitIgnoreSpec.from_lines(lines))


class Excluder:
    """Decides whether a discovered path is left out: config `exclude` patterns (relative to the
    project root) plus, when enabled, every .gitignore from the repository root down."""

    def __init__(self, root: Path, exclude: Sequence[str], respect_gitignore: bool) -> None:
        self._exclude = _IgnoreFile(root, pathspec.GitIgnoreSpec.from_lines(exclude)) if exclude else None
        self._respect_gitignore = respect_gitignore
        self._gitignores: dict[Path, _IgnoreFile | None] = {}

    def _gitignore(self, directory: Path) -> _IgnoreFile | None:
        if directory not in self._gitignores:
            self._gitignores[directory] = _read_gitignore(directory)
        return self._gitignores[directory]

    def inherited(self, directory: Path) -> list[_IgnoreFile]:
        """The .gitignore files above `directory`, from the repo root down, that apply inside it
        (its own is read by the walk)."""
        if not self._respect_gitignore:
            return []
        repo_root = find_repo_root(directory)
        if repo_root is None:
            return []
        parts = directory.relative_to(repo_root).parts
        above = (self._gitignore(repo_root.joinpath(*parts[:depth])) for depth in range(len(parts)))
        return [ignore for ignore in above if ignore is not None]

    def ignore_files(self) -> list[Path]:
        """Every .gitignore consulted so far, read or found absent: what the decisions rest on."""
        return [directory / ".gitignore" for directory in self._gitignores]

    def local(self, directory: Path) -> _IgnoreFile | None:
        return self._gitignore(directory) if self._respect_gitignore else None

    def excluded(self, path: Path, is_dir: bool, ignores: Sequence[_IgnoreFile]) -> bool:
        if self._exclude is not None and self._exclude.verdict(path, is_dir):
            return True
        # As in git, the deepest .gitignore with a matching pattern decides (`!keep.py` in a
        # subdirectory re-includes what the root ignored).
        for ignore in reversed(ignores):
            verdict = ignore.verdict(path, is_dir)
            if verdict is not None:
                return verdict
        return False


def is_excluded(path: Path, excluder: Excluder) -> bool:
    """Whether `exclude` or a .gitignore leaves out `path` (absolute) or a directory above it:
    `--force-exclude` asks this of the paths named on the command line, as a walk would."""
    for candidate in (path, *path.parents[:-1]):
        ignores = [*excluder.inherited(candidate.parent), *filter(None, [excluder.local(candidate.parent)])]
        if excluder.excluded(candidate, candidate != path or os.path.isdir(path), ignores):
            return True
    return False


def discover(
    paths: Sequence[str], excluder: Excluder, force_exclude: bool = False, walked: list[Path] | None = None
) -> Iterator[Path | PathError]:
    """Absolute paths of the Python files to lint, each once, in argument then walk order.

    A file named on the command line is always linted (even if ignored or not `*.py`), unless it
    is not a regular file (reading a FIFO or a device would block or never end); directories are
    walked for `*.py`, pruning skipped, virtualenv and ignored directories (a directory named
    inside an ignored one is walked without the ignore files above it). Symlinked directories
    are not followed (as git does not), so a link loop cannot recurse; a `*.py` link that leads
    nowhere (dangling, or a loop) is reported, since the user expects it checked. With
    `force_exclude`, a named path that `exclude` or a .gitignore leaves out is skipped too.
    `walked`: told every directory listed (the project index trusts an unchanged listing).
    """
    seen: set[Path] = set()
    for argument in paths:
        path = Path(os.path.abspath(argument))
        if force_exclude and is_excluded(path, excluder):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as error:
            yield PathError(path, _unreachable(path, error))
            continue
        if stat.S_ISDIR(mode):
            # a directory named inside an ignored one (`.venv/lib/.../torch`) is the user's
            # choice, as in ruff: the ignore files above it do not apply inside it
            inherited = [] if is_excluded(path, excluder) else excluder.inherited(path)
            files: Iterable[Path | PathError] = _walk(path, excluder, inherited, walked)
        elif stat.S_ISREG(mode):
            files = [path]
        else:
            yield PathError(path, "not a regular file (a FIFO, socket or device): not read")
            continue
        for file in files:
            if isinstance(file, PathError) or file not in seen:
                if isinstance(file, Path):
                    seen.add(file)
                yield file


def _unreachable(path: Path, error: OSError) -> str:
    """Why a path cannot be opened, in the words a user looks for."""
    if error.errno == errno.ELOOP:
        return "symbolic link loop: the link never leads to a file"
    if error.errno == errno.ENOENT:
        return "broken symbolic link: its target does not exist" if path.is_symlink() else "no such file or directory"
    return f"cannot access: {error.strerror or error}"


def _walk(
    directory: Path, excluder: Excluder, ignores: list[_IgnoreFile], walked: list[Path] | None = None
) -> Iterator[Path | PathError]:
    if walked is not None:
        walked.append(directory)
    local = excluder.local(directory)
    if local is not None:
        ignores = [*ignores, local]
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        yield PathError(directory, f"cannot read directory: {error.strerror or error}")
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if entry.name in SKIPPED_DIR_NAMES or is_virtualenv(path):
                continue
            if not excluder.excluded(path, True, ignores):
                yield from _walk(path, excluder, ignores, walked)
        elif not entry.name.endswith(".py") or excluder.excluded(path, False, ignores):
            continue
        else:
            try:
                is_file = entry.is_file()  # follows a link; free otherwise (the listing has the type)
                if not is_file and entry.is_symlink():
                    os.stat(path)  # a link to a directory passes; a dangling one or a loop raises
            except OSError as error:
                yield PathError(path, _unreachable(path, error))
                continue
            if is_file:
                yield path


def display_path(path: Path, cwd: Path | None = None) -> str:
    """How a path is shown: relative to the working directory when under it, else absolute."""
    cwd = cwd or Path.cwd()
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return str(path)
