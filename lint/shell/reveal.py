"""`csan-lint reveal FILE:LINE`: what the static analysis knows before the statement at a line
(as mypy's `reveal_type` shows a type), to see why it reports a finding, or does not.

The file is analysed as `csan-lint FILE` would analyse it alone (the project's settings and
assumptions, no other module's summaries), with a `Probe` (lint/interpret.py) in the control-flow driver that copies
the state each time a run reaches the statement. A statement may be reached several times in one
run (a loop's passes, a `try` body's handlers...): what is shown is the join of those states,
which is what holds at the line on every path the analysis followed (at a loop's fixpoint too).
Each interpreter's state is shown by its own `describe` (lint/describe.py).

The line's scope is the innermost function (or the module body) that holds its statement: only
its runs count. Runs made to summarise a function for its callers are not shown (they start
from symbolic arguments); a function no run of its own interprets says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.describe import Where, describe_flow, describe_host
from csan_lint.lint.engine import syntax_error_finding
from csan_lint.lint.hostflow import host_hazards
from csan_lint.lint.hoststate import HostState
from csan_lint.lint.interpret import SUMMARY, Probe, probing
from csan_lint.lint.model import Spellings
from csan_lint.lint.nodes import parse_module, remembered_subtrees
from csan_lint.lint.ordering import FlowState
from csan_lint.lint.positions import Positions, positions
from csan_lint.lint.shell.files import might_have_findings
from csan_lint.lint.streamflow import analyse
from csan_lint.lint.values import code_of

_DESCRIBE: dict[type, Callable[[Any, Where], dict[str, object]]] = {FlowState: describe_flow, HostState: describe_host}
Ranges = Mapping[cst.CSTNode, CodeRange] | Positions
_LINE_BREAK = re.compile(r"\r\n?|\n")
_CODE_WIDTH = 60
"""Longer code in a state is cut: a place names an expression, it does not quote a block."""

_STREAMS_SKIP = (
    "not interpreted: no stream code reaches it (streamflow interprets the module body when it has a "
    "`with` statement, and the functions that have one, are entered on a side stream by their callers, "
    "record streams, wait into the default stream, or call a function of the module that leaves a tensor "
    "written on another stream: lint/streamflow.py)"
)
_HOST_SKIP = (
    "not interpreted: the host analysis runs only on modules that import torch and mention an event, a "
    "graph capture or a non-blocking copy (lint/hostflow.py)"
)
_CLASS_BODY = "not interpreted: the analysis does not interpret class bodies, only their methods"
_PREFILTERED = (
    "note: a lint run skips this file: its code names no stream API, project wrapper or non-blocking copy "
    "(the prefilter, lint/shell/files.py); below is what the analysis finds all the same"
)
_NOT_REACHED = (
    "not reached: no path the analysis follows gets here (after a return, raise, break or continue, "
    "or in a branch a device fact rules out)"
)


class RevealError(Exception):
    """Bad input, worded with where it is (`path:line: ...`)."""


@dataclass(frozen=True)
class _Statement:
    node: cst.CSTNode
    start: int
    column: int
    end: int
    scopes: tuple[cst.FunctionDef | cst.ClassDef, ...]
    """The definitions around it, outermost first."""


class _Statements(cst.CSTVisitor):
    """Every statement (a line's, a compound's, an `elif`, each of a one-line suite) with its
    place and the definitions around it."""

    def __init__(self, ranges: Ranges) -> None:
        self.ranges = ranges
        self.found: list[_Statement] = []
        self.scopes: list[cst.FunctionDef | cst.ClassDef] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseStatement):
            self._add(node)
        elif isinstance(node, cst.SimpleStatementSuite):
            for small in node.body:
                self._add(small)
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self.scopes.append(node)
        return not isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine))  # no statement inside

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.scopes and original_node is self.scopes[-1]:
            self.scopes.pop()

    def _add(self, node: cst.CSTNode) -> None:
        where = self.ranges[node]
        self.found.append(_Statement(node, where.start.line, where.start.column, where.end.line, tuple(self.scopes)))


def reveal(
    source: str, path: str, line: int, spellings: Spellings, assumptions: Assumptions = DEFAULT_ASSUMPTIONS
) -> dict[str, object]:
    """What each analysis knows before the statement at `line` of `source` (the file at `path`),
    with the project's `spellings` and `assumptions`, as JSON-able data. Raises RevealError for
    a file that does not parse or a line that holds no statement."""
    try:
        module = parse_module(source)
    except cst.ParserSyntaxError as error:
        finding = syntax_error_finding(error, source, path)
        raise RevealError(f"{path}:{finding.line}:{finding.column}: {finding.message}") from None
    lines = _LINE_BREAK.split(source.removesuffix("\n").removesuffix("\r"))  # as the parser counts them
    if not 1 <= line <= len(lines):
        raise RevealError(f"{path}:{line}: line out of range: the file has {len(lines)} line(s)")
    ranges = positions(module)
    collector = _Statements(ranges)
    module.visit(collector)
    target = _statement_at(collector.found, line, path)
    where = _where(ranges)
    scope = target.scopes[-1] if target.scopes else None
    result: dict[str, object] = {
        "path": path,
        "line": line,
        "statement": lines[target.start - 1].strip(),
        "statement_line": target.start,
        "scope": _scope(target, ranges),
        "skipped_by_prefilter": not might_have_findings(source, spellings.leaves()),
    }
    if isinstance(scope, cst.ClassDef):
        result["analyses"] = {"streams": {"status": _CLASS_BODY}, "host": {"status": _CLASS_BODY}}
        return result
    body = scope.body.body if scope is not None else module.body
    targets = frozenset({target.node})
    streams, host = Probe(targets, body[0]), Probe(targets, body[0])
    with remembered_subtrees():
        with probing(streams):
            flow = analyse(module, path, spellings=spellings, assumptions=assumptions)
        with probing(host):
            host_hazards(flow)
    result["analyses"] = {"streams": _report(streams, _STREAMS_SKIP, where), "host": _report(host, _HOST_SKIP, where)}
    return result


def _statement_at(statements: Sequence[_Statement], line: int, path: str) -> _Statement:
    """The outermost statement that starts at `line` (`if c: x = y` is the `if`), else the
    innermost simple statement that spans it (a call written over several lines)."""
    starting = [statement for statement in statements if statement.start == line]
    if starting:
        return min(starting, key=lambda statement: statement.column)
    spanning = [
        statement
        for statement in statements
        if statement.start < line <= statement.end
        and isinstance(statement.node, (cst.SimpleStatementLine, cst.BaseSmallStatement))
    ]
    if spanning:
        return max(spanning, key=lambda statement: statement.start)
    raise RevealError(f"{path}:{line}: no statement at this line (a blank line, a comment, `else:` or a decorator?)")


def _scope(target: _Statement, ranges: Ranges) -> dict[str, object]:
    if not target.scopes:
        return {"kind": "module", "name": "<module>", "line": 1}
    scope = target.scopes[-1]
    kind = "class" if isinstance(scope, cst.ClassDef) else "function"
    name = ".".join(definition.name.value for definition in target.scopes)
    return {"kind": kind, "name": name, "line": ranges[scope].start.line}


def _where(ranges: Ranges) -> Where:
    def where(node: cst.CSTNode) -> tuple[int, int, str] | None:
        try:
            found = ranges[node]
        except KeyError:  # a node the analysis made (a probe, a stream's last launch)
            return None
        code = " ".join(code_of(node).split())  # type: ignore[arg-type]
        if len(code) > _CODE_WIDTH:
            code = f"{code[: _CODE_WIDTH - 3]}..."
        return found.start.line, found.start.column + 1, code

    return where


def _report(probe: Probe, skipped: str, where: Where) -> dict[str, object]:
    """An analysis' runs of the scope, each with the join of its states at the statement."""
    own = [(index, run) for index, run in enumerate(probe.runs) if run.role != SUMMARY]
    summaries = len(probe.runs) - len(own)
    if not own:
        also = f"; run {summaries} time(s) only to summarise it for its callers" if summaries else ""
        return {"status": skipped + also}
    runs = []
    for index, run in own:
        state = probe.state_at(index)
        described = _DESCRIBE[type(state)](state, where) if state is not None else None
        runs.append({"run": run.role, "visits": len(probe.visits.get(index, ())), "state": described})
    reached = any(run["state"] is not None for run in runs)
    return {"status": "interpreted" if reached else _NOT_REACHED, "runs": runs}


def format_text(result: dict[str, object]) -> str:
    """The report for a reader: the statement, its scope, then each analysis' runs and states."""
    scope: Any = result["scope"]
    where = f"line {scope['line']}" if scope["kind"] != "module" else "the module body"
    out = [f"{result['path']}:{result['statement_line']}: {result['statement']}"]
    out.append(f"scope: {scope['kind']} {scope['name']} ({where})" if scope["kind"] != "module" else f"scope: {where}")
    if result["skipped_by_prefilter"]:
        out.append(_PREFILTERED)
    analyses: Any = result["analyses"]
    for name, source in (("streams", "lint/streamflow.py"), ("host", "lint/hostflow.py")):
        report = analyses[name]
        out.append("")
        out.append(f"{name} ({source}): {report['status']}")
        for run in report.get("runs", ()):
            if run["state"] is None:
                out.append(f"  {run['run']}: {_NOT_REACHED}")
                continue
            visits = (
                "the state at its visit" if run["visits"] == 1 else f"the join of its {run['visits']} visits' states"
            )
            out.append(f"  {run['run']}: {visits}")
            out.extend(_lines(run["state"], 2))
    return "\n".join(out) + "\n"


def _lines(state: dict[str, Any], depth: int) -> list[str]:
    """A state's sections, each shown; below them, what is empty or unset is left out."""
    return [line for key, value in state.items() for line in _value(key, value, depth, keep=True)]


def _value(label: str, value: object, depth: int, *, keep: bool = False) -> list[str]:
    """`label: value`, nested by indent; an access or a copy on one line (`_phrase`)."""
    indent = "  " * depth
    if (value is None or value is False or value == [] or value == {}) and not keep:
        return []
    if isinstance(value, dict) and value:
        return [f"{indent}{label}:", *(line for k, v in value.items() for line in _value(k, v, depth + 1))]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        lines = [f"{indent}{label}:"]
        for item in value:
            nested = {k: v for k, v in item.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
            lines.append(f"{indent}  - {_phrase({k: v for k, v in item.items() if k not in nested})}")
            lines += [line for k, v in nested.items() for line in _value(k, v, depth + 2)]
        return lines
    return [f"{indent}{label}: {_scalar(value)}"]


def _scalar(value: object) -> str:
    if isinstance(value, (list, dict)):
        return ", ".join(map(str, value)) if value else "none"
    return "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


_PHRASES = (
    (("how", "stream", "at", "in"), "{how} on {stream} at {at} in {in}"),
    (("copy", "stream"), "copy at {copy} on {stream}"),
    (("name", "released_at"), "{name} released at {released_at}"),
)


def _phrase(item: dict[str, Any]) -> str:
    """`written on <current> at 4:5 y in f; ordered_before: <current>`: the fields that make a
    phrase, then the others that say something, as `key: value`."""
    parts: list[str] = []
    shown: set[str] = set()
    for keys, template in _PHRASES:
        if all(key in item for key in keys):
            parts.append(template.format(**item))
            shown.update(keys)
    parts += [
        f"{key}: {_scalar(value)}"
        for key, value in item.items()
        if key not in shown and not (value is None or value is False or value == [])
    ]
    return "; ".join(parts)
