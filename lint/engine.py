"""Source text in, findings out: parse, compute the module's facts once, run the rules on them.

Pure on purpose: no file I/O, no configuration, no suppressions. The command line, the
pre-commit hook and `--confirm` all apply those on top of this one function.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.analysis.driver import module_facts
from csan_lint.lint.model import NO_SPELLINGS, Finding, Spellings
from csan_lint.lint.nodes import parse_module, remembered_subtrees
from csan_lint.lint.recognize import holds_stream_code, stream_code_lines_in
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts
from csan_lint.lint.summaries import PackageIndex
from csan_lint.lint.syntax import python_syntax_error, syntax_error


def lint_source(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None = None,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    observed: ModuleFacts = NO_MODULE_FACTS,
) -> list[Finding]:
    """Parse, analyse, run the given rules (default: all). Pure: no file I/O, no config, no
    suppressions (the shell applies those). `package`: the other linted modules, whose
    functions' summaries calls to them use (without it, only this module's are followed).
    `spellings`: the project's own wrappers of the stream API; `assumptions`: those switched
    from their defaults (lint/analysis/assumptions.py); `observed`: what test runs saw of its
    functions (lint/run_facts.py), which settles assumptions. A file that does not parse returns exactly one
    Finding with code "CSL001", message "syntax error: <the parser's message>", at the error's
    1-based line/column, span = that line. Findings sorted by (line, column, code)."""
    return lint_and_recognize(source, path, rules, package, spellings, assumptions, observed)[0]


def lint_and_recognize(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None = None,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    observed: ModuleFacts = NO_MODULE_FACTS,
    *,
    stream_code: bool = False,
) -> tuple[list[Finding], frozenset[int]]:
    """`lint_source`, and with `stream_code` the lines the recognizer calls stream code
    (`recognize.stream_code_lines`) read off the same tree: `--confirm` needs both, and the
    parse is most of the cost of each."""
    outcome = lint_unless_stream_code(
        source, path, rules, package, spellings, assumptions, observed, stream_code, False
    )
    assert outcome is not None
    return outcome


def lint_unless_stream_code(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None,
    package: PackageIndex | None,
    spellings: Spellings,
    assumptions: Assumptions,
    observed: ModuleFacts,
    stream_code: bool,
    unless_held: bool,
) -> tuple[list[Finding], frozenset[int]] | None:
    """`lint_and_recognize`; with `unless_held`, None without an analysis when the module holds
    stream code (`recognize.holds_stream_code`): `--confirm` starts its tests knowing only that,
    and has such files analysed in the background."""
    try:
        module = parse_module(source)
    except cst.ParserSyntaxError as error:
        return [syntax_error_finding(error, source, path)], frozenset()
    if unless_held and holds_stream_code(module, spellings=spellings):
        return None
    with remembered_subtrees():  # the analysis and the rules walk each function body many times
        flow = module_facts(
            module, path, package=package, spellings=spellings, assumptions=assumptions, observed=observed
        )
        findings = [finding for rule in (all_rules() if rules is None else rules) for finding in rule().check(flow)]
    findings.sort(key=lambda finding: (finding.line, finding.column, finding.code))
    lines = stream_code_lines_in(module, spellings=spellings) if stream_code else frozenset()
    return findings, lines


def syntax_error_finding(error: cst.ParserSyntaxError, source: str, path: str) -> Finding:
    """CPython's account when it rejects the source too: libcst's native parser often reports
    the line after the error (`def f(:` at 2:1). libcst's own only for code CPython accepts."""
    return python_syntax_error(source, path) or syntax_error(
        path, error.editor_line, error.editor_column, error.message
    )
