"""Cheap stack capture for the hot path, resolved to text only when a report is made.

Capturing keeps code objects and instruction offsets: no line lookup, no strings. CSAN's
`traceback.StackSummary.extract` costs most of its per-launch time; this is about 13 times
cheaper (and reading `f_lineno` instead of `f_lasti` would double our cost: it scans the line
table). Lines are computed in `resolve`, when a report is made. Replayed traces carry frames
that are already resolved; `resolve` accepts both.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from collections.abc import Container, Iterable, Sequence
from types import CodeType
from typing import NamedTuple, Union


class Frame(NamedTuple):
    """One resolved frame, as a traceback shows it."""

    filename: str
    lineno: int
    function: str


Stack = tuple[Union[CodeType, int, Frame], ...]
"""Opaque outside this module; read it with `resolve`. A live stack is flat, innermost frame
FIRST, as the walk finds it: (code, f_lasti, caller's code, caller's f_lasti, ...), which saves
a tuple per frame and a reversal. A replayed stack is a tuple of Frames, innermost last.
Equal stacks mean the same call sites, so a Stack can key a cache or a dedup set."""

EMPTY_STACK: Stack = ()


def capture_stack(skip: int = 0, stop: Container[CodeType] = ()) -> Stack:
    """The caller's stack (minus `skip` more frames). The walk ends at a frame running one of
    the `stop` code objects (a test runner's call into the test, say: the frames outside it are
    never the user's, and under pytest they are most of the stack)."""
    frame = sys._getframe(skip + 1)
    flat: list[CodeType | int] = []
    append = flat.append
    if stop:
        while frame is not None and frame.f_code not in stop:
            append(frame.f_code)
            append(frame.f_lasti)
            frame = frame.f_back
    else:
        while frame is not None:
            append(frame.f_code)
            append(frame.f_lasti)
            frame = frame.f_back
    return tuple(flat)


def line_of(code: CodeType, lasti: int) -> int:
    """The source line of the instruction at byte offset `lasti` (what `frame.f_lineno` gives)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def resolve(stack: Stack | Sequence[Sequence[object]] | None) -> list[Frame]:
    """Frames of a live or replayed stack (lists of [file, line, function] are accepted too),
    innermost last."""
    if not stack:
        return []
    if isinstance(stack[0], CodeType):
        codes: Sequence[CodeType] = stack[0::2]  # type: ignore[assignment]
        offsets: Sequence[int] = stack[1::2]  # type: ignore[assignment]
        live = [Frame(code.co_filename, line_of(code, lasti), code.co_name) for code, lasti in zip(codes, offsets)]
        live.reverse()
        return live
    frames = []
    for entry in stack:
        if isinstance(entry, Frame):
            frames.append(entry)
        else:
            filename, lineno, function = entry
            frames.append(Frame(str(filename), int(lineno), str(function)))  # type: ignore[call-overload]
    return frames


def _package_dirs(names: Iterable[str]) -> list[str]:
    """Source folders of packages, found without importing them (torch must stay unimported)."""
    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
        elif spec.origin:
            # A single-module package (pytest.py, pluggy as a module): hide that file only.
            dirs.append(spec.origin)
    return [os.path.normcase(os.path.abspath(d)) for d in dirs]


class _Hidden:
    """Decides which files are not the user's: torch, csan_lint, pytest/pluggy and the stdlib."""

    def __init__(self) -> None:
        here = os.path.dirname(os.path.abspath(__file__))
        own = [os.path.join(os.path.dirname(here), d) for d in ("lint", "rules", "runtime", "csan_lint")]
        libraries = _package_dirs(("torch", "functorch", "_pytest", "pytest", "pluggy", "csan_lint"))
        self.prefixes = tuple(
            p if p.endswith((".py", ".pyc")) else p + os.sep
            for p in {os.path.normcase(p) for p in own} | set(libraries)
        )
        paths = sysconfig.get_paths()
        self.stdlib = tuple(
            {os.path.normcase(os.path.abspath(paths[k])) + os.sep for k in ("stdlib", "platstdlib")}
        )
        # site-packages may live inside the stdlib folder (non-venv installs): user code there stays.
        self.site = tuple(
            {os.path.normcase(os.path.abspath(paths[k])) + os.sep for k in ("purelib", "platlib")}
        )
        self.cache: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        hidden = self.cache.get(filename)
        if hidden is None:
            if filename.startswith("<"):
                # <frozen importlib._bootstrap>, <string>: exec'd code with no file is not a user frame.
                hidden = filename.startswith("<frozen")
            else:
                path = os.path.normcase(os.path.abspath(filename))
                hidden = path.startswith(self.prefixes) or (
                    path.startswith(self.stdlib) and not path.startswith(self.site)
                )
            self.cache[filename] = hidden
        return hidden


_hidden: _Hidden | None = None


def is_user_file(filename: str) -> bool:
    """False for torch's, csan_lint's, pytest's/pluggy's and the stdlib's files."""
    global _hidden
    if _hidden is None:
        _hidden = _Hidden()
    return not _hidden(filename)


def user_frames(frames: Iterable[Frame]) -> list[Frame]:
    """The user's frames, in order (innermost last)."""
    return [f for f in frames if is_user_file(f.filename)]


_SITE_CACHE_LIMIT = 65536
_innermost_cache: dict[Stack, Frame | None] = {}


def innermost_user_frame(stack: Stack | None) -> Frame | None:
    """The frame a report points at: the deepest user frame. Cached, since loops repeat stacks."""
    if not stack:
        return None
    try:
        return _innermost_cache[stack]
    except KeyError:
        pass
    found = user_frames(resolve(stack))
    frame = found[-1] if found else None
    if len(_innermost_cache) >= _SITE_CACHE_LIMIT:
        _innermost_cache.clear()
    _innermost_cache[stack] = frame
    return frame
