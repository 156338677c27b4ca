"""The linter never crashes on any Python, only reports: generated sources (hypothesmith, from
the grammar) and generated stream-heavy PyTorch code (a strategy of our own: hypothesmith rarely
writes torch code) through `lint_source` and through `lint_paths`, the CLI's path. Bounded
example counts here; benchmarks/fuzz_static.py runs many more."""

from __future__ import annotations

import tempfile
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import csan_lint_robustness_workloads as workloads  # loaded by this directory's conftest.py
from csan_lint.lint.engine import lint_source
from csan_lint.lint.registry import SYNTAX_ERROR_CODE
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.runner import lint_paths

CI = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
"""No deadline (a loaded CI machine), no example database written into the checkout."""


@settings(CI, max_examples=50)
@given(source=hypothesmith.from_grammar(), prefix=st.sampled_from(["", "import torch\n"]))
def test_any_python_is_linted_without_crashing(source: str, prefix: str) -> None:
    """With `import torch` on top too: a module that imports no torch name is not interpreted."""
    text = prefix + source
    workloads.check_findings(lint_source(text, "fuzz.py"), text, "fuzz.py")


NESTED_CAPTURE = """\
import torch


def f(graph, x):
    with torch.cuda.graph(graph):
        with torch.cuda.graph(graph):
            x.add_(1)
"""
"""Found by this test (shrunk by hand): an internal error in the capture tracking of hostflow."""


@settings(CI, max_examples=100)
@given(source=workloads.stream_programs)
@example(source=NESTED_CAPTURE)
def test_stream_heavy_code_is_analysed_without_crashing(source: str) -> None:
    compile(source, "generated.py", "exec")  # the strategy writes valid Python only
    findings = lint_source(source, "generated.py")
    assert not any(finding.code == SYNTAX_ERROR_CODE for finding in findings)
    workloads.check_findings(findings, source, "generated.py")


@settings(CI, max_examples=25)
@given(sources=st.lists(workloads.stream_programs, min_size=1, max_size=3))
def test_the_file_path_reports_what_the_engine_reports(sources: list[str]) -> None:
    """Through `lint_paths` (reading, prefilter, cache, suppressions): no tool error, and per
    file exactly the engine's findings (the generated code holds no suppression comments)."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for index, source in enumerate(sources):
            (root / f"m{index}.py").write_text(source)
        config = Config(root=root)
        for cache in (False, True, True):
            result = lint_paths([directory], config, jobs=1, cache=cache)
            assert not result.has_tool_errors
            expected = sorted(
                (finding.line, finding.column, finding.code, str(root / f"m{index}.py"))
                for index, source in enumerate(sources)
                for finding in lint_source(source, str(root / f"m{index}.py"))
            )
            actual = sorted((finding.line, finding.column, finding.code, finding.path) for finding in result.findings)
            assert actual == expected


@pytest.mark.parametrize("source", ["", "\n", "\\\n", "#", "\ufeff", "x = (", "\x00", "\t\tpass", "import torch\nwith"])
def test_degenerate_sources(source: str) -> None:
    workloads.check_findings(lint_source(source, "tiny.py"), source, "tiny.py")
