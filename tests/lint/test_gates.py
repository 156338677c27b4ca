"""What the analyses look at is decided on the parsed module (lint/analysis/uses.py), never on
its text: a comment or a string naming the stream API turns no rule on or off, and a spelling
the imports resolve counts however it is written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.uses import ModuleUses, module_uses
from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.names import ImportTable
from csan_lint.lint.scan import scan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
API_WORDS = (
    "torch.cuda.Event() s.wait_stream(t) e.wait(s) t.record_stream(s) torch.cuda.set_stream(s) "
    "torch.cuda.default_stream() functools.partial(f) lambda: 0 non_blocking=True pin_memory=True "
    "torch.cuda.synchronize() torch.cuda.graph(g) capture_begin() step(x) self.step(x)"
)


def uses(source: str, spellings: Spellings = NO_SPELLINGS) -> ModuleUses:
    module = cst.parse_module(textwrap.dedent(source))
    imports, functions = ImportTable(spellings), []
    scan(module.body, imports, functions, "", {}, [])
    return module_uses(module, imports, functions)


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


def with_api_comments(source: str) -> str:
    """`source` with the API named in a comment after every block header (the text of every
    function and class) and in a string at the end: the same lines, the same code."""
    lines = [
        f"{line}  # {API_WORDS}" if line.rstrip().endswith(":") and "#" not in line and '"' not in line else line
        for line in source.splitlines()
    ]
    return "\n".join(lines) + f'\n_NOTE = "{API_WORDS}"\n'


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda path: path.name)
def test_comments_and_strings_naming_the_api_change_no_finding(path: Path) -> None:
    source = path.read_text()
    assert findings(with_api_comments(source)) == findings(source)


def test_comments_and_strings_perform_nothing() -> None:
    source = f'''
        import torch

        def f(x):
            # {API_WORDS}
            """{API_WORDS}"""
            return x
        '''
    found = uses(source)
    assert (found.ops, found.builders, found.non_blocking, found.pins) == (frozenset(), frozenset(), False, False)
    assert found.calls == {}


def test_each_operation_is_resolved_through_the_imports_and_kept_by_function() -> None:
    found = uses(
        """
        import torch
        from torch.cuda import Event as Ev
        from deepspeed.accelerator import get_accelerator

        def make():
            return Ev(), get_accelerator().Stream()

        def order(s, e, work):
            s.wait_event(e)
            work.wait()

        def outer(t, s):
            def inner():
                t.record_stream(s)
            return lambda: torch.cuda.current_stream()
        """
    )
    assert found.own["make"] == {api.operation("torch.cuda.Event"), api.operation("torch.cuda.Stream")}
    assert found.own["order"] == {api.WAIT_EVENT}  # `work.wait()` waits on no event
    assert found.own["outer.inner"] == {api.RECORD_STREAM}
    assert found.own["outer"] == {api.operation("torch.cuda.current_stream")}  # its lambda's
    assert found.functions(api.RECORD_STREAM) == {"outer.inner"}
    assert found.functions(api.RECORD_STREAM, nested=True) == {"outer", "outer.inner"}
    assert found.builders == {"outer"}


def test_a_project_factory_makes_events_without_the_word_event() -> None:
    source = """
        import torch
        from pkg.cuda_utils import new_event

        def step(side):
            done = new_event()
            side.wait_event(done)
        """
    spellings = Spellings(event_factories=("pkg.cuda_utils.new_event",))
    assert uses(source, spellings).performs(Kind.EVENT_CREATE)
    assert not uses(source).performs(Kind.EVENT_CREATE)


@pytest.mark.parametrize(("argument", "expected"), [("non_blocking=True", True), ("non_blocking=flag", True),
                                                    ("non_blocking=False", False), ("", False)])  # fmt: skip
def test_a_non_blocking_copy_is_one_spelled_as_such(argument: str, expected: bool) -> None:
    assert uses(f"import torch\ny = x.to('cpu', {argument})\n").non_blocking == expected


ENTERED = """
import torch

class Reducer:
    def reduce(self, grads):
        with torch.cuda.stream(self.side):{comment}
            self.copy_back(grads)

    def copy_back(self, bucket):
        flat = torch.cat(bucket)
        for buf, synced in zip(bucket, flat.split(4)):
            buf.copy_(synced)
"""


@pytest.mark.parametrize("comment", ["", "  # self.copy_back(grads) runs on the side stream"])
def test_a_comment_naming_a_call_does_not_count_as_one(comment: str) -> None:
    """`copy_back` is entered on the side stream because every call of it is in the block: a
    comment that spells another call changes nothing."""
    assert findings(ENTERED.format(comment=comment)) == [("CSL201", 12)]


DEFERRED = """
import torch
from functools import partial as bind

def backward(op, x, dy, out):{comment}
    gemm = bind(wgrad_kernel, stream=torch.cuda.current_stream().cuda_stream)
    op.store.put([x, dy, out], gemm)
"""


@pytest.mark.parametrize("comment", ["", "  # a partial"])
def test_a_partial_under_another_name_is_followed_with_or_without_the_word(comment: str) -> None:
    assert findings(DEFERRED.format(comment=comment)) == [("CSL104", 6)]
