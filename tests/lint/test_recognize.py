"""Which lines are stream code, for every spelling of the stream API (lint/recognize.py)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.names import ImportTable
from csan_lint.lint.recognize import ContextFunctions, entered_streams, holds_stream_code, stream_code_lines
from csan_lint.lint.registry import all_rules

_HEADER = "import torch\nimport contextlib\nimport functools\nfrom deepspeed.accelerator import get_accelerator\n"
_HEADER_LINES = _HEADER.count("\n")


def _lines(body: str, spellings: Spellings = NO_SPELLINGS) -> list[int]:
    """The stream-code lines of `body`, numbered from its own first line."""
    found = stream_code_lines(_HEADER + textwrap.dedent(body), spellings=spellings)
    return sorted(line - _HEADER_LINES for line in found)


@pytest.mark.parametrize(
    "statement",
    [
        "with torch.cuda.stream(s): pass",
        "with torch.cuda.StreamContext(s): pass",
        "s = torch.Stream()",
        "e = torch.Event()",
        "torch.accelerator.set_stream(s)",
        "s = torch.accelerator.current_stream()",
        "torch.cuda.set_stream(s)",
        "with get_accelerator().stream(s): pass",
        "s = get_accelerator().Stream()",
        "e = get_accelerator().Event()",
        "s = get_accelerator().current_stream()",
        "with stream: pass",  # a parameter: only its name says it is a stream
        "with self.copy_stream: pass",
        "with (contextlib.nullcontext() if c else torch.cuda.stream(s)): pass",
        "ctx = functools.partial(torch.cuda.stream, s)",
        "stack.enter_context(torch.cuda.stream(s))",
        "done_event.record()",
        "self.ready_event.wait()",
        "side.wait_stream(main)",
        "s.wait_event(e)",
        "e = s.record_event()",
        "x.record_stream(s)",
        "y = x.to('cuda', non_blocking=True)",
        "y = x.to('cuda', non_blocking=flag)",
        "buf = torch.empty(4, pin_memory=True)",
        "buf = x.pin_memory()",
        "g.capture_begin()",
        "with torch.cuda.graph(g): pass",
        "g = torch.cuda.CUDAGraph()",
    ],
)
def test_each_spelling_marks_its_function(statement: str) -> None:
    body = f"def plain(x):\n    return x\n\ndef user(self, x, s, e, c, g, stack):\n    {statement}\n    return x\n"
    assert _lines(body) == [4, 5, 6]


@pytest.mark.parametrize(
    "statement",
    [
        "y = x.to('cuda', non_blocking=False)",
        "y = x + 1",
        "with open(path): pass",
        "with lock: pass",
        "result.wait()",
        "torch.cuda.synchronize()",
        "with torch.no_grad(): pass",
        "get_accelerator().device_name()",
    ],
)
def test_code_without_streams_is_not_marked(statement: str) -> None:
    assert _lines(f"def f(self, x, path, lock, result):\n    {statement}\n") == []


def test_whole_function_with_decorators_and_nested_functions_apart() -> None:
    body = """\
    @decorator
    def outer(x):
        def inner(s):
            with torch.cuda.stream(s):
                pass
        return inner

    @decorator
    def also(x):
        x.record_stream(s)

        def helper():
            return 1
        return helper
    """
    assert _lines(body) == [3, 4, 5, 8, 9, 10, 11, 12, 13, 14]


def test_module_and_class_level_statements() -> None:
    body = """\
    side = torch.cuda.Stream()
    plain = 1

    class Pipeline:
        copy_stream = torch.Stream()
        size = 4

        def run(self):
            return self.size

    if torch.cuda.is_available():
        with torch.cuda.stream(side):
            warm = torch.ones(1)
    """
    assert _lines(body) == [1, 5, 11, 12, 13]


def test_a_user_context_manager_and_its_callers() -> None:
    body = """\
    @contextlib.contextmanager
    def on_stream(stream, enabled=True):
        if not enabled:
            yield
            return
        with get_accelerator().stream(stream):
            yield

    def caller(x, s):
        with on_stream(s):
            return x * 2

    def not_a_caller(x):
        return x * 2
    """
    assert _lines(body) == [*range(1, 8), 9, 10, 11]


def test_a_method_returning_a_stream_context_and_its_callers() -> None:
    body = """\
    class Layer:
        def _stream_context(self, stream):
            return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)

        def forward(self, x):
            with self._stream_context(self.side):
                return x * 2

        def stacked(self, x):
            # the helper is spelled alike in two classes: it still means one thing
            with contextlib.ExitStack() as stack:
                stack.enter_context(self._stream_context(self.side))
                return x * 2

    class Other:
        def _stream_context(self, stream):
            return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)
    """
    assert _lines(body) == [2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17]


def test_project_wrappers_from_the_configuration() -> None:
    body = """\
    from mypkg.cuda_utils import on_stream, new_stream

    def run(x, s):
        with on_stream(s):
            return x * 2

    def make():
        return new_stream()
    """
    spellings = Spellings(
        stream_contexts=("mypkg.cuda_utils.on_stream",), stream_factories=("mypkg.cuda_utils.new_stream",)
    )
    assert _lines(body) == []
    assert _lines(body, spellings) == [3, 4, 5, 7, 8]


def test_an_accelerator_bound_to_a_name() -> None:
    body = """\
    accel = get_accelerator()

    def run(x):
        s = accel.Stream()
        return s
    """
    assert _lines(body) == [3, 4, 5]


def test_broken_source_has_no_stream_code() -> None:
    assert stream_code_lines("def f(:\n    torch.cuda.Stream()\n") == frozenset()


_WITHOUT_STREAMS = [
    _HEADER + "def f(self, x, path, lock, result):\n    y = x.to('cuda', non_blocking=False)\n    result.wait()\n",
    _HEADER
    + "class Loader:\n    def load(self, path):\n        with open(path):\n            torch.cuda.synchronize()\n",
    _HEADER + "async def f(x):\n    def g(y):\n        return y + 1\n    return g(x)\n",
]
_LAST_STATEMENT_ONLY = _WITHOUT_STREAMS[1] + "\nclass Late:\n    def m(self, x):\n        return x.pin_memory()\n"


@pytest.mark.parametrize(
    "source",
    [
        *(example.code for rule in all_rules() for example in (*rule.INVALID, *rule.VALID)),
        *_WITHOUT_STREAMS,
        _LAST_STATEMENT_ONLY,
    ],
)
def test_holds_stream_code_is_whether_there_are_stream_code_lines(source: str) -> None:
    """The question `--confirm` asks first, to start its tests before the analysis is done, has
    the answer the recognizer's lines give: on the rules' examples, code without streams, and a
    file whose only stream code is the last method of its last class."""
    assert holds_stream_code(cst.parse_module(source)) == bool(stream_code_lines(source))


def test_holds_stream_code_finds_the_last_statement_and_nothing_in_code_without_streams() -> None:
    assert holds_stream_code(cst.parse_module(_LAST_STATEMENT_ONLY))
    assert not any(holds_stream_code(cst.parse_module(source)) for source in _WITHOUT_STREAMS)


def _entered(with_item: str, functions: str = "", is_stream: frozenset[str] = frozenset()) -> list[str] | None:
    imports = ImportTable()
    module = cst.parse_module(_HEADER + functions)
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    imports.add(small)
    defs = [node for node in module.body if isinstance(node, cst.FunctionDef)]
    functions_found = ContextFunctions(defs, imports)
    found = entered_streams(cst.parse_expression(with_item), imports, functions_found, is_stream.__contains__)
    return None if found is None else [cst.Module([]).code_for_node(stream) for stream in found]


@pytest.mark.parametrize(
    ("item", "streams"),
    [
        ("torch.cuda.stream(s)", ["s"]),
        ("torch.cuda.StreamContext(stream=self.side)", ["self.side"]),
        ("torch.cuda.stream(None)", ["None"]),
        ("get_accelerator().stream(s)", ["s"]),
        ("s if c else t", None),
        ("torch.cuda.stream(s) if c else contextlib.nullcontext()", ["s"]),
        ("torch.cuda.stream(self.s1) if c else torch.cuda.stream(self.s0)", ["self.s1", "self.s0"]),
        ("functools.partial(torch.cuda.stream, s)", ["s"]),
        ("functools.partial(print, s)", None),
        ("self.comm_stream", ["self.comm_stream"]),
        ("torch.cuda.Stream()", ["torch.cuda.Stream()"]),
        ("lock", None),
        ("open(path)", None),
    ],
)
def test_entered_streams(item: str, streams: list[str] | None) -> None:
    assert _entered(item) == streams


def test_a_name_bound_to_a_stream_is_entered() -> None:
    assert _entered("s", is_stream=frozenset({"s"})) == ["s"]
    assert _entered("s") is None


def test_wrapper_arguments_are_the_callers() -> None:
    functions = """
def on_stream(x, stream=None):
    return torch.cuda.stream(stream)

@contextlib.contextmanager
def converted(stream):
    with torch.cuda.stream(as_cuda(stream)):
        yield

@contextlib.contextmanager
def fixed(self):
    with torch.cuda.stream(self.side):
        yield
"""
    assert _entered("on_stream(a, b)", functions) == ["b"]
    assert _entered("on_stream(a, stream=b)", functions) == ["b"]
    assert _entered("on_stream(a)", functions) == []
    assert _entered("self.on_stream(b)", functions) == []  # a method would bind `x` to `self`: `b` is `x`
    assert _entered("self.fixed()", functions) == ["self.side"]
    assert _entered("converted(s)", functions) == ["s"]
    assert _entered("other.fixed()", functions) == ["other.side"]  # another object's `self.side` is its own
