"""The edits behind `--fix`: the primitives a rule's fix builder is made of (where a statement
can go, how the module spells a stream, the insertion and its safety), and the two builders
that two rules share: a wait before a stream block (CSL101, and CSL103 for a read on the current
stream) and a join before a use (CSL102, and CSL103 for a read on another stream). The other
builders live in the rule that uses them.

Rules call these at finding time, when the facts are at hand (the stream block, the use, the
stream and tensor spellings); `csan_lint.lint.shell.fix` applies the edits to the source text. A
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

from csan_lint.lint.facts import CURRENT, Hazard, Missing, ModuleFlow
from csan_lint.lint.model import Edit, Finding, FixSafety
from csan_lint.lint.names import CURRENT_STREAM, ImportTable
from csan_lint.lint.nodes import children, target_names
from csan_lint.lint.recognize import entered_streams

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
    spelled = module_context(flow.module).current_stream()
    return spelled.code if spelled is not None else f"{CURRENT_STREAM}()"


def wait_before_block(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """`s.wait_stream(torch.cuda.current_stream())` just before the `with` block (`Missing.FORK`).

    Before it, not as its first statement: inside the block the current stream is `s` itself.
    The block must not sit in another stream block, where the current stream is not the one
    that wrote the tensor."""
    block = hazard.access.span_node
    stream = hazard.access.stream
    if hazard.missing is not Missing.FORK or not isinstance(block, cst.With) or not is_name(stream):
        return None
    context = module_context(flow.module)
    outer = ancestors(flow, block)
    if outer is None or binds(block, stream) or any(may_switch_stream(context, node) for node in outer):
        return None
    current = context.current_stream()
    if current is None:
        return None
    start = flow.line(block)
    return insertion(
        flow, context, Edit(start, start, f"{stream}.wait_stream({current.code})", scope(flow, block)), current
    )


def join_before_use(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """`<using stream>.wait_stream(<writing stream>)` just before the statement that uses
    the tensor (`Missing.JOIN`). There the using stream is current, whatever blocks surround the statement."""
    stream, other = hazard.access.stream, hazard.other
    if not (is_name(other) and (stream == CURRENT or is_name(stream))):
        return None
    context = module_context(flow.module)
    statement = statement_of(flow, hazard.access.node)
    if statement is None:
        return None
    spelled = spelled_stream(context, stream)
    if spelled is None:
        return None
    start = flow.line(statement)
    return insertion(
        flow, context, Edit(start, start, f"{spelled.code}.wait_stream({other})", scope(flow, statement)), spelled
    )


def is_name(expression: str) -> bool:
    """A plain name or attribute chain, which a fix can name again without side effects."""
    return _DOTTED.fullmatch(expression) is not None


def spelled_stream(context: Context, stream: str) -> Spelling | None:
    """How a fix names a stream token: the current stream as the module can say it, another as written."""
    return context.current_stream() if stream == CURRENT else Spelling(stream, "safe")


def binds(block: cst.With, expression: str) -> bool:
    """The block's own `as` targets rebind the name the fix would use."""
    root = expression.split(".", 1)[0]
    return any(
        item.asname is not None and any(name == root for name in target_names(item.asname.name)) for item in block.items
    )


def may_switch_stream(context: Context, node: cst.CSTNode) -> bool:
    """A `with` around the block that is, or may be (a context held in a variable), a stream."""
    if not isinstance(node, cst.With):
        return False
    return any(
        not isinstance(item.item, cst.Call) or entered_streams(item.item, context.imports) is not None
        for item in node.items
    )


def insertion(flow: ModuleFlow, context: Context, edit: Edit, spelling: Spelling) -> Fix | None:
    """The fix that makes `edit`, with `import torch` first where the stream's spelling needs it
    (unsafe); None where the module has no import to put it before."""
    if not spelling.needs_import:
        return Fix((edit,), spelling.safety)
    if context.import_statement is None:
        return None
    line = flow.line(context.import_statement)
    return Fix((Edit(line, line, "import torch"), edit), "unsafe")


@dataclass(frozen=True)
class Spelling:
    """A stream as a fix writes it, and whether that is as the author would (`safety`)."""

    code: str
    safety: FixSafety
    needs_import: bool = False


class Context:
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

    def current_stream(self) -> Spelling | None:
        """How this module can say `torch.cuda.current_stream()`: as written when `torch` is
        imported as itself, else through its own alias (unsafe), else after `import torch`."""
        bound = {local: self.imports.qualified(cst.Name(local)) for local in sorted(self.imports.names)}
        if bound.get("torch") == "torch":
            return Spelling("torch.cuda.current_stream()", "safe")
        spellings = ((CURRENT_STREAM, "()"), ("torch.cuda", ".current_stream()"), ("torch", ".cuda.current_stream()"))
        for target, suffix in spellings:
            local = next((name for name, full in bound.items() if full == target), None)
            if local is not None:
                return Spelling(f"{local}{suffix}", "unsafe")
        if "torch" in bound:  # `torch` names something else: an import would shadow it
            return None
        return Spelling("torch.cuda.current_stream()", "unsafe", needs_import=True)


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
            if child is node or holds(flow.range(child), target):
                current = child
                break
        else:
            return None
    return path


def ancestors(flow: ModuleFlow, node: cst.CSTNode) -> list[cst.CSTNode] | None:
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


def scope(flow: ModuleFlow, node: cst.CSTNode) -> int:
    """Line of the `def` the node runs in, 0 at module level (see Edit.scope)."""
    functions = [ancestor for ancestor in _path(flow, node) or () if isinstance(ancestor, cst.FunctionDef)]
    return flow.line(functions[-1]) if functions else 0


def holds(outer: CodeRange, inner: CodeRange) -> bool:
    """`inner` lies within `outer` (an empty `outer` holds nothing)."""
    start, end = (outer.start.line, outer.start.column), (outer.end.line, outer.end.column)
    return (
        start != end and start <= (inner.start.line, inner.start.column) and (inner.end.line, inner.end.column) <= end
    )


def statement_of(flow: ModuleFlow, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement a new line can go just before so that it runs before `node` does, in the
    same stream context: the simple statement holding it, or the compound statement whose
    header (an `if` test, a `for` iterable, a `with` item) holds it. None for a `while`
    test (evaluated again each iteration), an `elif` test, lambdas and comprehensions
    (evaluated later or repeatedly), and one-line bodies (`if c: use(y)`)."""
    outer = ancestors(flow, node)
    if outer is None:
        return None
    child = node
    for index, parent in enumerate(outer):
        if isinstance(parent, (cst.SimpleStatementSuite, cst.While, cst.Match, cst.BaseComp)):
            return None
        if isinstance(parent, cst.SimpleStatementLine):
            return parent
        if isinstance(parent, cst.If):
            is_elif = index + 1 < len(outer) and isinstance(outer[index + 1], cst.If)
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
def module_context(module: cst.Module) -> Context:
    """The module's `Context`, built once for all its fixes."""
    return Context(module)
