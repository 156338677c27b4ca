"""The edits behind `--fix`: for a hazard, the one statement whose insertion orders it, and where.

Rules call these at finding time, when the facts are at hand (the stream block, the use, the
stream and tensor spellings); `csan_lint.lint.fix` applies the edits to the source text. A
builder returns no fix unless the edit is certain to order the hazard:
- the stream must be a plain name or attribute chain (`s`, `self.copy_stream`): a call
  (`torch.cuda.Stream()`) would make a new stream, or run its side effects twice;
- the inserted statement must run where the stream it names is current (for
  `torch.cuda.current_stream()`) and bound, and the tensor it names is still the one used.

A fix that must reach `torch.cuda` through an alias (`tc.current_stream()`) or add
`import torch` is marked unsafe: right, but written in a way the author did not choose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

import libcst as cst
from libcst.metadata import CodeRange

from csan_lint.lint.hostflow import HostHazard, first_copy
from csan_lint.lint.model import Edit, Finding, FixSafety
from csan_lint.lint.names import CURRENT_STREAM, ImportTable
from csan_lint.lint.nodes import children, target_names
from csan_lint.lint.ordering import CURRENT, Hazard
from csan_lint.lint.recognize import entered_streams
from csan_lint.lint.streamflow import ModuleFlow

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Fix:
    edits: tuple[Edit, ...]
    safety: FixSafety


def attach(finding: Finding, fix: Fix | None) -> Finding:
    """The finding with the fix's edits, unchanged when there is no fix."""
    if fix is None:
        return finding
    return replace(finding, edits=fix.edits, fix_safety=fix.safety)


def current_stream_code(flow: ModuleFlow) -> str:
    """`torch.cuda.current_stream()` as this module's fixes spell it, for the `help:` text."""
    spelled = _context(flow.module).current_stream()
    return spelled.code if spelled is not None else f"{CURRENT_STREAM}()"


def wait_before_block(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """CSL101: `s.wait_stream(torch.cuda.current_stream())` just before the `with` block.

    Before it, not as its first statement: inside the block the current stream is `s` itself.
    The block must not sit in another stream block, where the current stream is not the one
    that wrote the tensor."""
    block = hazard.access.span_node
    stream = hazard.access.stream
    if hazard.other != CURRENT or not isinstance(block, cst.With) or not _is_name(stream):
        return None
    context = _context(flow.module)
    ancestors = _ancestors(flow, block)
    if ancestors is None or _binds(block, stream) or any(_may_switch_stream(context, outer) for outer in ancestors):
        return None
    current = context.current_stream()
    if current is None:
        return None
    start = flow.line(block)
    return _fix(
        flow, context, Edit(start, start, f"{stream}.wait_stream({current.code})", _scope(flow, block)), current
    )


def join_before_use(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """CSL102: `<using stream>.wait_stream(<writing stream>)` just before the statement that uses
    the tensor. There the using stream is current, whatever blocks surround the statement."""
    stream, other = hazard.access.stream, hazard.other
    if not (_is_name(other) and (stream == CURRENT or _is_name(stream))):
        return None
    context = _context(flow.module)
    statement = _statement_of(flow, hazard.access.node)
    if statement is None:
        return None
    spelled = context.current_stream() if stream == CURRENT else _Spelling(stream, "safe")
    if spelled is None:
        return None
    start = flow.line(statement)
    return _fix(
        flow, context, Edit(start, start, f"{spelled.code}.wait_stream({other})", _scope(flow, statement)), spelled
    )


def wait_before_overwrite(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """CSL103: order the overwriting stream after the read. A read on the current stream is
    waited for just before the overwriting block (as for CSL101); a read on a named stream,
    just before the overwriting statement (as for CSL102)."""
    if hazard.other == CURRENT:
        return wait_before_block(flow, hazard)
    return join_before_use(flow, hazard)


def record_after_use(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """CSL201: `t.record_stream(s)` right after the block (or statement) that used `t` on `s`,
    so the allocator waits for `s` before reusing `t`'s memory. Not when `t` is released inside
    that block: after it the name no longer means the tensor that was used.

    A statement that leaves the function (`return t + 1`) gets the call just before it: the
    allocator waits for the recorded streams' work up to the free, wherever the call stands."""
    anchor = hazard.access.span_node
    stream, tensor = hazard.access.stream, hazard.tensor
    if not (_is_name(tensor) and (stream == CURRENT or _is_name(stream))):
        return None
    if (
        isinstance(anchor, cst.With)
        and stream == CURRENT
        or not isinstance(anchor, (cst.With, cst.SimpleStatementLine))
    ):
        return None
    where = flow.range(anchor)
    line = where.end.line + 1
    if _leaves(anchor) or hazard.returned:  # before the tensor is handed over
        if isinstance(anchor, cst.With):
            return None
        line = where.start.line
    if hazard.release is not None and where.start.line <= flow.line(hazard.release) <= where.end.line:
        return None
    context = _context(flow.module)
    if isinstance(anchor, cst.With) and (_binds(anchor, stream) or _binds(anchor, tensor)):
        return None
    spelled = context.current_stream() if stream == CURRENT else _Spelling(stream, "safe")
    if spelled is None:
        return None
    edit = Edit(line, where.start.line, f"{tensor}.record_stream({spelled.code})", _scope(flow, anchor))
    return _fix(flow, context, edit, spelled)


def sync_before_read(flow: ModuleFlow, hazard: HostHazard) -> Fix | None:
    """CSL301: `s.synchronize()` just before the statement whose host read would see the copy
    unfinished. A copy made on the current stream is synced as `torch.cuda.current_stream()`
    only where that is still the stream current (no stream block around the read)."""
    copy = first_copy(flow, hazard)
    stream = copy.stream if copy is not None else dict(hazard.fields).get("stream", "")
    if not (stream == CURRENT or _is_name(stream)) or len({other.stream for other in hazard.copies}) > 1:
        return None
    context = _context(flow.module)
    statement = _statement_of(flow, hazard.node)
    if statement is None or copy is not None and _holds(flow.range(statement), flow.range(copy.node)):
        return None  # a copy read in the statement that makes it (`.to(..., non_blocking=True).tolist()`)
    ancestors = _ancestors(flow, hazard.node)
    if ancestors is None or stream == CURRENT and any(_may_switch_stream(context, outer) for outer in ancestors):
        return None
    spelled = context.current_stream() if stream == CURRENT else _Spelling(stream, "safe")
    if spelled is None:
        return None
    start = flow.line(statement)
    return _fix(flow, context, Edit(start, start, f"{spelled.code}.synchronize()", _scope(flow, statement)), spelled)


def _leaves(statement: cst.With | cst.SimpleStatementLine) -> bool:
    """Control never reaches the line after the statement: it ends in `return`, `raise`..."""
    last: cst.CSTNode = statement
    while isinstance(last, cst.With):
        last = last.body if isinstance(last.body, cst.SimpleStatementSuite) else last.body.body[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return isinstance(last.body[-1], (cst.Return, cst.Raise, cst.Break, cst.Continue))
    return False


def _is_name(expression: str) -> bool:
    return _DOTTED.fullmatch(expression) is not None


def _binds(block: cst.With, expression: str) -> bool:
    """The block's own `as` targets rebind the name the fix would use."""
    root = expression.split(".", 1)[0]
    return any(
        item.asname is not None and any(name == root for name in target_names(item.asname.name)) for item in block.items
    )


def _may_switch_stream(context: _Context, node: cst.CSTNode) -> bool:
    """A `with` around the block that is, or may be (a context held in a variable), a stream."""
    if not isinstance(node, cst.With):
        return False
    return any(
        not isinstance(item.item, cst.Call) or entered_streams(item.item, context.imports) is not None
        for item in node.items
    )


def _fix(flow: ModuleFlow, context: _Context, edit: Edit, spelling: _Spelling) -> Fix | None:
    if not spelling.needs_import:
        return Fix((edit,), spelling.safety)
    if context.import_statement is None:
        return None
    line = flow.line(context.import_statement)
    return Fix((Edit(line, line, "import torch"), edit), "unsafe")


@dataclass(frozen=True)
class _Spelling:
    code: str
    safety: FixSafety
    needs_import: bool = False


class _Context:
    """The names the module binds at its top level (a fix may be put in any function: an import
    made inside one function is no binding it can use). Built once per module with hazards."""

    def __init__(self, module: cst.Module) -> None:
        self.imports = ImportTable()
        self.import_statement: cst.SimpleStatementLine | None = None
        """Where `import torch` goes: before the first top-level import after `__future__` ones."""
        for statement in module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    self.imports.add(small)
                    if self.import_statement is None and not _is_future(small):
                        self.import_statement = statement

    def current_stream(self) -> _Spelling | None:
        """How this module can say `torch.cuda.current_stream()`: as written when `torch` is
        imported as itself, else through its own alias (unsafe), else after `import torch`."""
        bound = {local: self.imports.qualified(cst.Name(local)) for local in sorted(self.imports.names)}
        if bound.get("torch") == "torch":
            return _Spelling("torch.cuda.current_stream()", "safe")
        spellings = ((CURRENT_STREAM, "()"), ("torch.cuda", ".current_stream()"), ("torch", ".cuda.current_stream()"))
        for target, suffix in spellings:
            local = next((name for name, full in bound.items() if full == target), None)
            if local is not None:
                return _Spelling(f"{local}{suffix}", "unsafe")
        if "torch" in bound:  # `torch` names something else: an import would shadow it
            return None
        return _Spelling("torch.cuda.current_stream()", "unsafe", needs_import=True)


def _path(flow: ModuleFlow, node: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The nodes from the module down to `node`'s parent; None if `node` is not found.

    Found by walking down into the child whose position holds the node's, not with a parent
    map: that would visit the whole module (a fifth of the lint time of a 200 kB file) for
    the few nodes a fix looks at."""
    target = flow.range(node)
    path: list[cst.CSTNode] = []
    current: cst.CSTNode = flow.module
    while current is not node:
        path.append(current)
        for child in children(current):
            if child is node or _holds(flow.range(child), target):
                current = child
                break
        else:
            return None
    return path


def _ancestors(flow: ModuleFlow, node: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The node's parents, innermost first, up to the function (or module) it runs in."""
    path = _path(flow, node)
    if path is None:
        return None
    inner = []
    for ancestor in reversed(path):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        inner.append(ancestor)
    return inner


def _scope(flow: ModuleFlow, node: cst.CSTNode) -> int:
    """Line of the `def` the node runs in, 0 at module level (see Edit.scope)."""
    functions = [ancestor for ancestor in _path(flow, node) or () if isinstance(ancestor, cst.FunctionDef)]
    return flow.line(functions[-1]) if functions else 0


def _holds(outer: CodeRange, inner: CodeRange) -> bool:
    start, end = (outer.start.line, outer.start.column), (outer.end.line, outer.end.column)
    return (
        start != end and start <= (inner.start.line, inner.start.column) and (inner.end.line, inner.end.column) <= end
    )


def _statement_of(flow: ModuleFlow, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement a new line can go just before so that it runs before `node` does, in the
    same stream context: the simple statement holding it, or the compound statement whose
    header (an `if` test, a `for` iterable, a `with` item) holds it. None for a `while`
    test (evaluated again each iteration), an `elif` test, lambdas and comprehensions
    (evaluated later or repeatedly), and one-line bodies (`if c: use(y)`)."""
    ancestors = _ancestors(flow, node)
    if ancestors is None:
        return None
    child = node
    for index, parent in enumerate(ancestors):
        if isinstance(parent, (cst.SimpleStatementSuite, cst.While, cst.Match, cst.BaseComp)):
            return None
        if isinstance(parent, cst.SimpleStatementLine):
            return parent
        if isinstance(parent, cst.If):
            is_elif = index + 1 < len(ancestors) and isinstance(ancestors[index + 1], cst.If)
            return parent if child is parent.test and not is_elif else None
        if isinstance(parent, cst.For):
            return parent if child is parent.iter else None
        if isinstance(parent, cst.With):
            return parent if isinstance(child, cst.WithItem) else None
        if isinstance(parent, (cst.BaseSuite, cst.BaseCompoundStatement)):
            return None
        child = parent
    return None


def _is_future(node: cst.Import | cst.ImportFrom) -> bool:
    return isinstance(node, cst.ImportFrom) and isinstance(node.module, cst.Name) and node.module.value == "__future__"


@lru_cache(maxsize=1)
def _context(module: cst.Module) -> _Context:
    return _Context(module)
