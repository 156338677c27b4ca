"""What a sanitized run observes about the user's functions, for the static pass (lint/run_facts.py
defines the file). Torch-free: the dispatch-mode side (runtime/facts_mode.py) tells it about
operations and stream switches, with the frame that made them and how to read a tensor.

No trace function runs on every call. A call of a function is seen at the first operation (or
stream switch) made while its frame is on the stack: its *activation*. At that moment the frame's
tensor arguments hold what the caller handed over, so the engine's last write to each says where
it was produced, relative to the stream current then (the stream the function was entered on:
a switch is seen before it happens). Activations are known by the frame and the identities of the
arguments the function never rebinds, so that a loop calling a function again with new tensors
is a new call even where the new frame reuses the old one's address; a loop passing the same
tensors again counts once (its context is the same). Frames of test files are not recorded.
"""

from __future__ import annotations

import dis
import linecache
import os
import threading
from collections.abc import Callable, Container
from types import CodeType, FrameType
from typing import Any

from csan_lint.lint.run_facts import MAX_TESTS, dump, function_hashes
from csan_lint.runtime.events import HOST
from csan_lint.runtime.stacks import is_placed
from csan_lint.runtime.tracker import ALLOCATION_OPERATOR

MAX_ACTIVATIONS = 4096
"""Per thread; past it the table starts again (a call seen again is merged into its context)."""

Describe = Callable[[Any], list[tuple[str, str, int]]]
"""A value -> the tensors it stands for, each (the attribute path from the value: "" for the value
itself, "grad" for a parameter's gradient; its device: cuda/cpu/pinned; the address of its
first byte); [] if it is no tensor."""


class _Function:
    """A function the facts are kept for: its key in the file and the arguments it never rebinds."""

    __slots__ = ("code", "fixed", "key", "params")

    def __init__(self, code: CodeType, key: tuple[str, str, str]) -> None:
        self.code = code
        self.key = key
        count = code.co_argcount + code.co_kwonlyargcount
        self.params = code.co_varnames[:count]
        stored = {
            instruction.argval
            for instruction in dis.get_instructions(code)
            if instruction.opname in ("STORE_FAST", "DELETE_FAST", "STORE_DEREF", "DELETE_DEREF")
        }
        self.fixed = tuple(name for name in self.params if name not in stored)


class FactsRecorder:
    """Collects, per function, the contexts it was called in and the copies it issued.

    `tracker()`: the engine now (a restart replaces it); `stream_name(stream)`: the sanitizer's
    name for a stream; `stop`: ids of the code objects where stack walks end (a test runner's)."""

    def __init__(
        self, tracker: Callable[[], Any], stream_name: Callable[[int], str], stop: Container[int] = ()
    ) -> None:
        self.tracker = tracker
        self.stream_name = stream_name
        self.stop = stop
        self.test: str | None = None
        """The node id of the running test (the pytest plugin sets it)."""
        self.functions: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._codes: dict[int, tuple[CodeType, _Function | None]] = {}
        self._hashes: dict[str, dict[str, tuple[int, str]]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    # -- what the dispatch side reports ------------------------------------------------------

    def entered(self, frame: FrameType | None, stream: int, describe: Describe) -> None:
        """An operation (or a stream switch) made from `frame` with `stream` current: the calls
        on the stack not seen yet are entered on `stream`. Inner frames first; a frame seen
        already means every frame outside it was seen too."""
        activations = getattr(self._local, "activations", None)
        if activations is None or len(activations) > MAX_ACTIVATIONS:
            activations = self._local.activations = {}
        while frame is not None:
            code = frame.f_code
            if id(code) in self.stop:
                return
            function = self._function(frame)
            if function is not None:
                values = frame.f_locals
                identity = (id(code), tuple(id(values.get(name)) for name in function.fixed))
                if activations.get(id(frame)) == identity:
                    return
                activations[id(frame)] = identity
                self._context(function, values, stream, describe)
            frame = frame.f_back

    def copied(self, frame: FrameType | None, to_host: bool, non_blocking: bool) -> None:
        """A copy between the host and the device, made by the innermost recorded function."""
        while frame is not None and id(frame.f_code) not in self.stop:
            function = self._function(frame)
            if function is not None:
                self._add(function.key, "copies", ("d2h" if to_host else "h2d", non_blocking))
                return
            if is_placed(frame.f_code):
                return  # the innermost user frame is not a recorded function (a test, a lambda)
            frame = frame.f_back

    # -- the file ------------------------------------------------------------------------------

    def entries(self) -> list[dict[str, Any]]:
        """The functions as the facts file spells them (lint/run_facts.py)."""
        with self._lock:
            functions = [(key, dict(record)) for key, record in self.functions.items()]
        entries = []
        for (module, qualname, digest), record in functions:
            contexts = [
                {
                    "entry": entry,
                    "entry_name": name,
                    "arguments": [{"name": a, "written": w, "device": d} for a, w, d in arguments],
                    "tests": tests,
                }
                for (entry, name, arguments), tests in sorted(record["contexts"].items())
            ]
            copies = [
                {"direction": direction, "non_blocking": non_blocking, "tests": tests}
                for (direction, non_blocking), tests in sorted(record["copies"].items())
            ]
            entries.append(
                {
                    "module": module,
                    "qualname": qualname,
                    "source_hash": digest,
                    "file": record["file"],
                    "line": record["line"],
                    "contexts": contexts,
                    "copies": copies,
                }
            )
        return entries

    def write(self, path: str) -> None:
        text = dump(self.entries())
        temporary = f"{path}.tmp{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)

    # -- inside --------------------------------------------------------------------------------

    def _function(self, frame: FrameType) -> _Function | None:
        """The recorded function `frame` runs, if any: a user's function (not a test file's)
        whose text in its file is what the static pass hashes (lambdas and code whose file
        changed since it was imported are not)."""
        code = frame.f_code
        known = self._codes.get(id(code))
        if known is not None:
            return known[1]
        function = None
        filename = code.co_filename
        base = os.path.basename(filename)
        if is_placed(code) and not (base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"):
            hashes = self._hashes.get(filename)
            if hashes is None:
                hashes = self._hashes[filename] = function_hashes("".join(linecache.getlines(filename)))
            found = hashes.get(code.co_qualname)
            if found is not None and found[0] == code.co_firstlineno:
                module = frame.f_globals.get("__name__") or os.path.splitext(base)[0]
                function = _Function(code, (module, code.co_qualname, found[1]))
                with self._lock:  # `entries()` may read them from another thread
                    self.functions.setdefault(
                        function.key, {"file": _shown(filename), "line": found[0], "contexts": {}, "copies": {}}
                    )
        self._codes[id(code)] = (code, function)
        return function

    def _context(self, function: _Function, values: dict[str, Any], stream: int, describe: Describe) -> None:
        arguments = []
        tracker = self.tracker()
        for name in function.params:
            for path, device, ptr in describe(values.get(name)):
                shown = f"{name}.{path}" if path else name
                arguments.append((shown, _written(tracker.last_write(ptr), stream), device))
        name = self.stream_name(stream)
        entry = "default" if name == "the default stream" else "side"
        self._add(function.key, "contexts", (entry, name, tuple(arguments)))

    def _add(self, key: tuple[str, str, str], kind: str, what: tuple[Any, ...]) -> None:
        with self._lock:
            tests = self.functions[key][kind].setdefault(what, [])
            if self.test is not None and self.test not in tests and len(tests) < MAX_TESTS:
                tests.append(self.test)


def _written(last: tuple[int, str] | None, entry: int) -> str:
    """`same`, `other` or `never` (lint/run_facts.py's WRITTEN): the last write's stream against
    the entry stream; an allocation's stand-in write, or the host's, is none on the device."""
    if last is None or last[0] == HOST or last[1] == ALLOCATION_OPERATOR:
        return "never"
    return "same" if last[0] == entry else "other"


def _shown(filename: str) -> str:
    """Relative to the working directory (the rootdir of a pytest run) when under it: a file a
    team commits must not name one machine's paths."""
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative.replace(os.sep, "/")
