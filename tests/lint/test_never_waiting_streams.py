"""A stream the module makes and never makes wait (`never-waiting-streams-read-callers-data`):
data whose producer is not seen, read there, may still be being written by the caller's stream.
Any code of the module that may make it wait (a wait on it, a wait of the current stream inside
a block that enters it, a loop whose items wait, a helper it is handed to) settles it; the source
of a copy to the device is host memory."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import NEVER_WAITING_STREAMS_READ_CALLERS_DATA, Assumptions
from csan_lint.lint.engine import lint_source

ON = Assumptions.from_switches([(NEVER_WAITING_STREAMS_READ_CALLERS_DATA, True)])

RUNNER = """
import torch

class Runner:
    def __init__(self, model):
        self.model = model
        self.stream = torch.cuda.Stream()
        self.streams = [torch.cuda.Stream() for _ in range(2)]

    def __call__(self, x, i):
        with torch.cuda.stream({stream}):
            y = self.model(torch.relu(x))
        torch.cuda.current_stream().wait_stream({stream})
        return y

    def other(self):
        {elsewhere}
"""


def findings(
    stream: str = "self.stream", elsewhere: str = "pass", assumptions: Assumptions = ON
) -> list[tuple[str, int, tuple[str, ...]]]:
    source = textwrap.dedent(RUNNER.format(stream=stream, elsewhere=elsewhere))
    return sorted((f.code, f.line, f.assumptions) for f in lint_source(source, "m.py", assumptions=assumptions))


@pytest.mark.parametrize("stream", ["self.stream", "self.streams[i]"])
def test_a_read_on_a_stream_nothing_makes_wait_races_with_the_callers_stream(stream: str) -> None:
    assert findings(stream) == [("CSL101", 12, (NEVER_WAITING_STREAMS_READ_CALLERS_DATA,))]


def test_off_by_default() -> None:
    assert findings(assumptions=Assumptions()) == []


@pytest.mark.parametrize(
    ("stream", "elsewhere"),
    [
        ("self.stream", "self.stream.wait_stream(torch.cuda.current_stream())"),
        ("self.stream", "self.stream.wait_event(self.ready)"),
        ("self.stream", "self.ready.wait(self.stream)"),
        ("self.stream", "helpers.fork(self.stream)"),
        (
            "self.stream",
            "with torch.cuda.stream(self.stream):\n            torch.cuda.current_stream().wait_stream(self.main)",
        ),
        ("self.streams[i]", "self.streams[0].wait_stream(torch.cuda.current_stream())"),
        ("self.streams[i]", "for s in self.streams:\n            s.wait_stream(torch.cuda.current_stream())"),
    ],
)
def test_code_that_may_make_the_stream_wait_anywhere_in_the_module_settles_it(stream: str, elsewhere: str) -> None:
    assert findings(stream, elsewhere) == []


def test_the_source_of_a_copy_to_the_device_is_host_memory() -> None:
    """Only the upload's source is read there: the assumption adds nothing."""
    source = textwrap.dedent(
        """
        import torch

        class Prefetcher:
            def __init__(self, loader):
                self.loader = iter(loader)
                self.stream = torch.cuda.Stream()

            def preload(self, batch):
                with torch.cuda.stream(self.stream):
                    self.batch = batch.cuda(non_blocking=True)
                    self.batch = self.batch.float()
                self.total = batch.float().sum()
        """
    )
    assert lint_source(source, "m.py", assumptions=ON) == lint_source(source, "m.py")


TWO_METHODS = """
import torch

class Interpolator:
    def __init__(self, model):
        self.model = model
        self.stream = torch.cuda.Stream()

    def prepare(self, frame):
        {prepare}

    def infer(self):
        with torch.cuda.stream(self.stream):
            out = self.model(self.frame)
        self.stream.synchronize()
        return out
"""


@pytest.mark.parametrize(
    ("prepare", "found"),
    [
        ("self.frame = frame.cuda()\n        self.frame.mul_(1 / 255)", [("CSL101", 15)]),
        ("self.frame = frame", []),  # nothing says `self.frame` is a tensor
    ],
)
def test_an_attribute_another_method_uses_as_a_tensor_is_one_here(prepare: str, found: list[tuple[str, int]]) -> None:
    """`self.frame` is only handed to the model in `infer`; `prepare` shows it is a tensor (its
    in-place method), and `infer` is not told who wrote it last."""
    source = textwrap.dedent(TWO_METHODS.format(prepare=prepare))
    assert [(f.code, f.line) for f in lint_source(source, "m.py", assumptions=ON)] == found
