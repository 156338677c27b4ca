"""Cheap stack capture for the hot path, resolved to text only when a report is made.

Capturing keeps code objects and instruction offsets: no line lookup, no strings. CSAN's
`traceback.StackSummary.extract` costs most of its per-launch time; this is about 13 times
cheaper (and reading `f_lineno` instead of `f_lasti` would double our cost: it scans the line
table). Lines are computed in `resolve`, when a report is made. Replayed traces carry frames
that are already resolved; `resolve` accepts both.
"""

from __future__ import annotations

import dis
import gc
import importlib.util
import inspect
import os
import re
import sys
import sysconfig
from collections.abc import Container, Iterable, Sequence
from types import CodeType, FrameType
from typing import Any, NamedTuple, cast


class Frame(NamedTuple):
    """One resolved frame, as a traceback shows it."""

    filename: str
    lineno: int
    function: str


Stack = tuple[CodeType | int | Frame, ...]
"""Opaque outside this module; read it with `resolve`. A live stack is flat, innermost frame
FIRST, as the walk finds it: (code, f_lasti, caller's code, caller's f_lasti, ...), which saves
a tuple per frame and a reversal. A replayed stack is a tuple of Frames, innermost last.
Equal stacks mean the same call sites, so a Stack can key a cache or a dedup set."""

EMPTY_STACK: Stack = ()


def capture_stack(skip: int = 0, stop: Container[int] = (), start: FrameType | None = None) -> Stack:
    """The caller's stack (minus `skip` more frames), or `start`'s. The walk ends at a frame
    running one of the code objects whose `id()` is in `stop` (a test runner's call into the
    test, say: the frames outside it are never the user's, and under pytest they are most of the
    stack). Ids, not code objects: hashing a code object hashes its bytecode and constants."""
    frame: FrameType | None = sys._getframe(skip + 1) if start is None else start
    flat: list[CodeType | int] = []
    append = flat.append
    if stop:
        while frame is not None:
            code = frame.f_code  # read once: each read is a getter call
            if id(code) in stop:
                break
            append(code)
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


_CACHE_LIMIT = 65536
# Keyed by id(code): hashing a code object hashes its bytecode and constants (a 30-frame stack
# takes ~5 us to hash). Each value holds its code object, which keeps the id from being reused.
_code_is_user: dict[int, tuple[CodeType, int]] = {}
_frames: dict[tuple[int, int], tuple[CodeType, Frame]] = {}


def _frame(code: CodeType, lasti: int) -> Frame:
    cached = _frames.get((id(code), lasti))
    if cached is None:
        if len(_frames) >= _CACHE_LIMIT:
            _frames.clear()
        cached = _frames[(id(code), lasti)] = (code, Frame(code.co_filename, line_of(code, lasti), code.co_name))
    return cached[1]


def resolve(stack: Stack | Sequence[Sequence[object]] | None) -> list[Frame]:
    """Frames of a live or replayed stack (lists of [file, line, function] are accepted too),
    innermost last."""
    if not stack:
        return []
    if isinstance(stack[0], CodeType):
        live = [_frame(code, lasti) for code, lasti in zip(stack[0::2], stack[1::2], strict=True)]  # type: ignore[arg-type]
        live.reverse()
        return live
    frames = []
    for entry in stack:
        if isinstance(entry, Frame):
            frames.append(entry)
        else:
            filename, lineno, function = cast("Sequence[Any]", entry)
            frames.append(Frame(str(filename), int(lineno), str(function)))
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


_HIDDEN_PACKAGES = ("torch", "functorch", "_pytest", "pytest", "pluggy", "csan_lint")

# The same libraries on the machine that recorded a replayed trace, wherever they were installed.
_FOREIGN_LIBRARY = re.compile(
    rf"[/\\](?:site|dist)-packages[/\\](?:{'|'.join(_HIDDEN_PACKAGES)})(?:[/\\]|\.py$)"
    + r"|[/\\]lib[/\\]python3\.\d+[/\\](?!(?:site|dist)-packages[/\\])"
)


class _Hidden:
    """Decides which files are not the user's: torch, csan_lint, pytest/pluggy and the stdlib."""

    def __init__(self) -> None:
        here = os.path.dirname(os.path.abspath(__file__))
        own = [os.path.join(os.path.dirname(here), d) for d in ("lint", "rules", "runtime", "csan_lint")]
        libraries = _package_dirs(_HIDDEN_PACKAGES)
        self.prefixes = tuple(
            p if p.endswith((".py", ".pyc")) else p + os.sep
            for p in {os.path.normcase(p) for p in own} | set(libraries)
        )
        paths = sysconfig.get_paths()
        self.stdlib = tuple({os.path.normcase(os.path.abspath(paths[k])) + os.sep for k in ("stdlib", "platstdlib")})
        # site-packages may live inside the stdlib folder (non-venv installs): user code there stays.
        self.site = tuple({os.path.normcase(os.path.abspath(paths[k])) + os.sep for k in ("purelib", "platlib")})
        self.cache: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        hidden = self.cache.get(filename)
        if hidden is None:
            if filename.startswith("<"):
                # <frozen importlib._bootstrap> is the import system; <string>, <stdin> are the user's.
                hidden = filename.startswith("<frozen")
            else:
                path = os.path.normcase(os.path.abspath(filename))
                hidden = (
                    path.startswith(self.prefixes)
                    or (path.startswith(self.stdlib) and not path.startswith(self.site))
                    or _FOREIGN_LIBRARY.search(filename) is not None
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


_FORWARDS_ARGUMENTS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def forwards(code: CodeType) -> bool:
    """Whether `code` is a decorator's wrapper, a frame the user does not act on (the race is
    the caller's): a closure taking `*args, **kwargs` that calls with them something it closed
    over (`return func(*args, **kwargs)`, whatever it checks or warns first), or a function that
    `functools.wraps` made the wrapper of another (it has `__wrapped__`). Judged by structure,
    never by file or function name; the `__wrapped__` look-up walks the heap's referrers, so
    it is asked only of closures the first test does not settle, once per code object."""
    if not code.co_freevars:
        return False
    if code.co_flags & _FORWARDS_ARGUMENTS == _FORWARDS_ARGUMENTS and _calls_closed_over_with_args(code):
        return True
    return any(
        getattr(function, "__code__", None) is code and hasattr(function, "__wrapped__")
        for function in gc.get_referrers(code)
    )


def _calls_closed_over_with_args(code: CodeType) -> bool:
    """`func(*args, ...)` in the bytecode, `func` a free variable and `args` the `*args`
    parameter: the callee is loaded from the closure right before the star-arguments."""
    star = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("PUSH_NULL", "CACHE")]
    has_star_call = any(i.opname == "CALL_FUNCTION_EX" for i in instructions)
    return has_star_call and any(
        callee.opname == "LOAD_DEREF"
        and callee.argval in code.co_freevars
        and argument.opname.startswith("LOAD_FAST")
        and argument.argval == star
        for callee, argument in zip(instructions, instructions[1:], strict=False)
    )


def _placement(code: CodeType) -> int:
    """2: a frame a report may point at (the user's, not a decorator's wrapper); 1: a user's
    wrapper; 0: not the user's. Cached per code object."""
    known = _code_is_user.get(id(code))
    if known is None:
        if len(_code_is_user) >= _CACHE_LIMIT:
            _code_is_user.clear()
        rank = 0 if not is_user_file(code.co_filename) else 1 if forwards(code) else 2
        known = _code_is_user[id(code)] = (code, rank)
    return known[1]


def is_placed(code: CodeType) -> bool:
    """Whether a frame running `code` is one a report may point at (`innermost_user_frame`)."""
    return _placement(code) == 2


def wrapper_frames(stack: Stack | None) -> list[bool]:
    """For each frame of `resolve(stack)` (innermost last): whether it is a decorator's wrapper
    (`forwards`). Replayed stacks keep no code: none is."""
    if not stack or not isinstance(stack[0], CodeType):
        return [False] * len(stack or ())
    flags = [_placement(code) == 1 for code in stack[0::2]]  # type: ignore[arg-type]
    flags.reverse()
    return flags


def innermost_user_frame(stack: Stack | None) -> Frame | None:
    """The frame a report points at, and errors are deduplicated by: the deepest user frame
    that is not a decorator's wrapper (`forwards`). Called for every race found, so live stacks
    are scanned from the inside with cached answers."""
    if not stack:
        return None
    if not isinstance(stack[0], CodeType):
        found = user_frames(resolve(stack))
        return found[-1] if found else None
    wrapper: Frame | None = None  # when the user's only frames are wrappers: the innermost
    for i in range(0, len(stack), 2):
        code: CodeType = stack[i]  # type: ignore[assignment]
        rank = _placement(code)
        if rank == 2:
            return _frame(code, stack[i + 1])  # type: ignore[arg-type]
        if rank == 1 and wrapper is None:
            wrapper = _frame(code, stack[i + 1])  # type: ignore[arg-type]
    return wrapper
