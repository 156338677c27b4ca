"""lint_source: the contract the command line, the hook and --confirm build on."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Span
from csan_lint.lint.registry import SYNTAX_ERROR_CODE, rule_by_code

SOURCE = textwrap.dedent(
    """\
    import torch

    def f(x, s):
        y = x * 2
        with torch.cuda.stream(s):
            z = y + 1
        return z * 2
    """
)


def test_findings_sorted_with_span_and_fix() -> None:
    findings = lint_source(SOURCE, "pkg/model.py")
    assert [(f.line, f.column, f.code) for f in findings] == [
        (6, 13, "CSL101"),
        (6, 13, "CSL201"),
        (7, 12, "CSL102"),
        (7, 12, "CSL201"),
    ]
    assert {f.path for f in findings} == {"pkg/model.py"}
    assert [f.span for f in findings] == [Span(5, 6), Span(5, 6), Span(7, 7), Span(7, 7)]
    assert all(f.fix for f in findings)


def test_rules_selects_what_runs() -> None:
    only = rule_by_code("missing-join")
    assert only is not None
    assert [f.code for f in lint_source(SOURCE, "m.py", rules=[only])] == ["CSL102"]
    assert lint_source(SOURCE, "m.py", rules=[]) == []


def test_syntax_error_is_one_located_finding() -> None:
    [finding] = lint_source("import torch\n\ndef f(:\n    pass\n", "broken.py")
    assert finding.code == SYNTAX_ERROR_CODE
    assert finding.message.startswith("syntax error: ")
    assert len(finding.message) > len("syntax error: ")
    assert (finding.path, finding.line, finding.column) == ("broken.py", 3, 7)
    assert finding.span == Span(3, 3)


def test_syntax_error_even_with_rules_off() -> None:
    [finding] = lint_source("x = (\n", "broken.py", rules=[])
    assert (finding.code, finding.line) == (SYNTAX_ERROR_CODE, 1)


def test_clean_and_empty_sources() -> None:
    assert lint_source("", "empty.py") == []
    assert lint_source("import torch\nx = torch.ones(3)\n", "plain.py") == []


def test_no_torch_import() -> None:
    probe = (
        "import sys; from csan_lint.lint.engine import lint_source; "
        "lint_source(sys.argv[1], 'm.py'); print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe, SOURCE], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
