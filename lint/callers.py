"""What the callers of a function in the same module do around the call: join or fork a stream.

A function's pending side-stream work at return, and its side-stream use of the caller's
tensors at entry, are left to its callers when every one of them orders that stream itself
(DESIGN.md: "flagged unless every caller in the linted code orders it"). The test is textual,
on each caller's body without comments; where in the body is not checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

_COMMENT = re.compile(r"#[^\n]*")


def uncommented_text(module: cst.Module, function: cst.FunctionDef) -> str:
    """A function's source without its comments, for the textual tests of what it orders: a
    sync commented out orders nothing."""
    return _COMMENT.sub("", module.code_for_node(function))


class CallersJoin:
    """Whether every function of the module that calls `name` joins a stream (waits on it:
    `wait_stream(s)`, spelled as the callee spells it), forks it (`s.wait_stream(`), or
    synchronizes. Callers' text is made only when a finding asks."""

    def __init__(self, name: str, functions: Sequence[tuple[str, cst.FunctionDef]], module: cst.Module | None) -> None:
        self.name, self.functions, self.module = name, functions, module
        self.texts: list[str] | None = None

    def __call__(self, stream: str) -> bool:
        """Every caller joins `stream` into its own: the callee's pending work there is ordered."""
        return self._every_caller((f"wait_stream({stream})", ".synchronize()"))

    def forks(self, stream: str) -> bool:
        """Every caller orders `stream` after its own writes before the callee uses them there."""
        return self._every_caller((f"{stream}.wait_stream(", ".synchronize()"))

    def called(self) -> bool:
        """Some function of the module calls it: a value it returns goes to code we see."""
        return bool(self._callers())

    def _every_caller(self, orderings: tuple[str, ...]) -> bool:
        texts = self._callers()
        return bool(texts) and all(any(ordering in text for ordering in orderings) for text in texts)

    def _callers(self) -> list[str]:
        """The text of each function of the module that calls `name`, without comments."""
        if self.texts is None:
            call = re.compile(rf"(?<!def )\b{re.escape(self.name.rpartition('.')[2])}\(")  # not a nested def
            self.texts = []
            module = self.module
            if module is not None:
                for name, function in self.functions:
                    text = uncommented_text(module, function)
                    if name != self.name and call.search(text):
                        self.texts.append(text)
        return self.texts


NO_CALLERS = CallersJoin("", (), None)
"""For a function no linted code calls: no caller orders anything."""
