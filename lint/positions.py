"""Where nodes are, computed the cheap way: the ranges libcst's PositionProvider gives, without
building a CodeRange for every node of the module.

PositionProvider regenerates the code while updating a line and column (a regex split) for every
token and making two CodePositions per node: about twice the parse itself. A lint needs the
positions of a handful of nodes, so this regenerates the code once recording only token indexes
per node (the same before/after and syntactic hooks PositionProvider uses), and turns an index
into a line and column when asked (character offsets of tokens, then the line starts).
tests/lint/test_libcst_shortcuts.py holds it to PositionProvider's answer for every node of a
corpus; a libcst whose codegen stops calling these hooks gets PositionProvider instead.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState  # the hook PositionProvider itself subclasses
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

_NEWLINE = re.compile(r"\r\n?|\n")
"""What PositionProvider counts as a line break."""


@dataclass(frozen=False)
class _TokenMarks(CodegenState):
    """Codegen that notes, per node, the token indexes where its range starts and ends. Keyed
    by `id(node)`: a libcst node hashes in Python, a hook's cost on every node; the value
    holds the node, so no id marked is reused while the marks live."""

    marks: dict[int, tuple[cst.CSTNode, int, int]] = field(default_factory=dict)
    _starts: list[int] = field(default_factory=list)

    def pop_trailing_newline(self) -> None:
        """Kept: PositionProvider has counted it by then, and ranges may end after it."""

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop()
        if id(node) not in self.marks:  # a syntactic position, recorded inside, wins
            self.marks[id(node)] = (node, start, len(self.tokens))

    def record_syntactic_position(  # type: ignore[override]  # a context manager, not a generator's
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _SyntacticPosition:
        return _SyntacticPosition(self, node, start_node, end_node)


class _SyntacticPosition:
    """`_TokenMarks.record_syntactic_position`'s context: a class, not `@contextmanager`, whose
    generator machinery cost more than the rest of the hooks on the ~400k nodes of a big file."""

    __slots__ = ("_end_node", "_marks", "_node", "_start", "_start_node")

    def __init__(
        self, marks: _TokenMarks, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None
    ) -> None:
        self._marks, self._node, self._start_node, self._end_node = marks, node, start_node, end_node
        self._start = 0

    def __enter__(self) -> None:
        self._start = len(self._marks.tokens)

    def __exit__(self, *exception: object) -> None:
        marks = self._marks
        start, end = self._start, len(marks.tokens)
        if self._start_node is not None:
            start = marks.marks[id(self._start_node)][1]
        if self._end_node is not None:
            end = marks.marks[id(self._end_node)][2]
        marks.marks[id(self._node)] = (self._node, start, end)


def positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange] | Positions:
    """`positions[node]` for every node of `module`: ours, or PositionProvider's where this
    libcst's codegen no longer calls the hooks ours listens to."""
    try:
        return Positions(module)
    except _HooksNotCalled:
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


class _HooksNotCalled(Exception):
    pass


class Positions:
    """`positions[node]`: the node's CodeRange, as PositionProvider would give it."""

    def __init__(self, module: cst.Module) -> None:
        state = _TokenMarks(default_indent=module.default_indent, default_newline=module.default_newline)
        module._codegen(state)
        if id(module) not in state.marks:
            raise _HooksNotCalled
        self._marks = state.marks
        self._offsets = [0, *itertools.accumulate(map(len, state.tokens))]
        code = "".join(state.tokens)
        self._line_starts = [0, *(match.end() for match in _NEWLINE.finditer(code))]

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        _, start, end = self._marks[id(node)]
        return CodeRange(self._position(start), self._position(end))

    def _position(self, token: int) -> CodePosition:
        offset = self._offsets[token]
        line = bisect.bisect_right(self._line_starts, offset)
        return CodePosition(line, offset - self._line_starts[line - 1])
