"""Methods of another class of the module, called on an object of it (`self.stager.stage(x)`,
`stager.stage(x)`): the call runs that class's method summary, the object's attributes standing
for the method's `self`, when every binding of the object says which class it is."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STAGER = """
import typing

import torch


class Stager:
    def __init__(self):
        self.stream = torch.cuda.Stream()
        self.ready = torch.cuda.Event()

    def stage(self, batch):
        with torch.cuda.stream(self.stream):
            self.staged = batch.to("cuda", non_blocking=True)
            self.ready.record()

    def join(self):
        torch.cuda.current_stream().wait_stream(self.stream)

"""

ON_SELF = """
class Trainer:
    def __init__(self):
        self.stager = Stager()

    def step(self, batch):
        self.stager.stage(batch)
        {before}
        return self.stager.staged * 2
"""


def findings(source: str) -> list[tuple[str, int, str]]:
    return sorted((f.code, f.line, f.message) for f in lint_source(textwrap.dedent(source), "m.py"))


def test_an_attribute_staged_by_the_objects_method_and_read_with_no_wait_is_flagged() -> None:
    assert findings(STAGER + ON_SELF.format(before="pass")) == [
        (
            "CSL102",
            28,
            "'self.stager.staged' was written on side stream 'self.stager.stream' and is read on the "
            "current stream with no wait_stream/wait_event between them",
        )
    ]


@pytest.mark.parametrize(
    "before",
    [
        "self.stager.join()",  # another method of the object orders its stream before ours
        "self.stager.ready.wait()",  # the event `stage` recorded on the object
        "torch.cuda.current_stream().wait_stream(self.stager.stream)",
    ],
)
def test_a_join_through_the_object_orders_what_its_method_left_pending(before: str) -> None:
    assert findings(STAGER + ON_SELF.format(before=before)) == []


@pytest.mark.parametrize(
    "receiver",
    [
        "def step(batch):\n    stager = Stager()",
        "def step(batch, stager: Stager):\n    pass",
        "def step(batch, stager: typing.Optional[Stager] = None):\n    pass",
        "def step(batch, stager: 'Stager | None'):\n    pass",
    ],
)
def test_a_local_or_an_annotated_parameter_of_the_class_is_followed(receiver: str) -> None:
    source = STAGER + receiver + "\n    stager.stage(batch)\n    return stager.staged * 2\n"
    assert [(code, message.split(" was")[0]) for code, _, message in findings(source)] == [
        ("CSL102", "'stager.staged'")
    ]


@pytest.mark.parametrize(
    "source",
    [
        # an attribute given the class's objects only from annotated parameters
        ON_SELF.format(before="pass")
        .replace("self.stager = Stager()", "self.stager = stager")
        .replace("def __init__(self):", "def __init__(self, stager: Stager):"),
        # and reset to None in between
        ON_SELF.format(before="pass") + "\n    def close(self):\n        self.stager = None\n",
    ],
)
def test_bindings_that_agree_on_the_class_are_followed(source: str) -> None:
    assert [code for code, _, _ in findings(STAGER + source)] == ["CSL102"]


@pytest.mark.parametrize(
    "source",
    [
        ON_SELF.format(before="pass").replace("self.stager = Stager()", "self.stager = make_stager()"),
        ON_SELF.format(before="pass") + "\n    def swap(self, other):\n        self.stager = other\n",
        "def step(batch, stager):\n    stager.stage(batch)\n    return stager.staged * 2\n",
        "def step(batch, stager: Stager):\n    stager = pick(stager)\n    stager.stage(batch)\n"
        "    return stager.staged * 2\n",
    ],
)
def test_an_object_whose_class_is_not_known_is_not_followed(source: str) -> None:
    assert findings(STAGER + source) == []


def test_the_callers_tensor_read_by_the_objects_method_on_its_stream_is_checked_at_the_call() -> None:
    source = STAGER + ON_SELF.format(before="self.stager.join()").replace(
        "def step(self, batch):", "def step(self, x):\n        batch = x * 3"
    )
    (finding,) = [f for f in findings(source) if f[1] > 25]  # the method itself is checked on its own
    assert finding[:2] == ("CSL101", 27)
    assert "read on side stream 'self.stager.stream'" in finding[2]


@pytest.mark.parametrize(
    ("make", "loop"),
    [
        ("self.stagers = [Stager() for _ in range(2)]", "for stager in self.stagers:"),
        ("self.stagers = []\n        self.stagers.append(Stager())", "for stager in self.stagers[1:]:"),
        ("self.stagers: list[Stager] = make()", "for stager in self.stagers:"),
        ("pass", "for stager in stagers:"),  # the parameter `stagers: list[Stager]`
    ],
)
def test_an_item_of_a_container_of_the_class_taken_by_a_loop_is_followed(make: str, loop: str) -> None:
    source = f"""
class Trainer:
    def __init__(self):
        {make}

    def step(self, batch, stagers: typing.Sequence[Stager]):
        {loop}
            stager.stage(batch)
            out = stager.staged * 2
"""
    assert [(code, message.split(" was")[0]) for code, _, message in findings(STAGER + source)] == [
        ("CSL102", "'stager.staged'")
    ]


@pytest.mark.parametrize(
    "make",
    [
        "self.stagers = [Stager(), make()]",
        "self.stagers = [Stager()]\n        self.stagers.append(make())",
    ],
)
def test_a_container_of_mixed_items_is_not_followed(make: str) -> None:
    source = f"""
class Trainer:
    def __init__(self):
        {make}

    def step(self, batch):
        for stager in self.stagers:
            stager.stage(batch)
            out = stager.staged * 2
"""
    assert findings(STAGER + source) == []


FLUSHED = """
class Flusher:
    def flush(self):
        torch.cuda.synchronize()


class Trainer:
    def __init__(self):
        self.flushers = [{make}]

    def step(self, x, s):
        with torch.cuda.stream(s):
            self.y = x * 2
        self.flushers[0].flush()
        return self.y * 3
"""


def test_a_method_called_on_an_item_of_a_container_of_the_class_orders_like_it() -> None:
    """A device sync made by the item's method orders the side stream's work before ours."""
    assert findings(STAGER + FLUSHED.format(make="Flusher()")) == []
    assert [code for code, _, _ in findings(STAGER + FLUSHED.format(make="make()"))] == ["CSL102"]


ENTERED = """
import torch


class Loader:
    def __init__(self):
        self.stream = torch.cuda.Stream()

    def on_stream(self):
        return torch.cuda.stream(self.stream)


class Trainer:
    def __init__(self):
        self.loader = Loader()
        self.stream = torch.cuda.Stream()

    def step(self, x):
        self.y = x * 2
        {waiter}.wait_stream(torch.cuda.current_stream())
        with self.loader.on_stream():
            self.z = self.y + 1
        torch.cuda.current_stream().wait_stream({waiter})
"""


def test_a_stream_context_made_by_another_objects_method_enters_that_objects_stream() -> None:
    assert findings(ENTERED.format(waiter="self.loader.stream")) == []
    (finding,) = findings(ENTERED.format(waiter="self.stream"))
    assert finding[:2] == ("CSL101", 22)
    assert "read on side stream 'self.loader.stream'" in finding[2]


@pytest.mark.parametrize(
    ("init", "followed"),
    [
        ("if cond:\n            self.stager = Stager()\n        else:\n            self.stager = None", True),
        ("if a:\n            pass\n        elif b:\n            self.stager = make()", False),
        ("try:\n            pass\n        except ImportError:\n            self.stager = make()", False),
        ("with lock:\n            self.stager = make()", False),
        ("match kind:\n            case 1:\n                self.stager = make()", False),
    ],
)
def test_every_binding_in_nested_statements_counts(init: str, followed: bool) -> None:
    source = ON_SELF.format(before="pass").replace("self.stager = Stager()", f"self.stager = Stager()\n        {init}")
    assert [code for code, _, _ in findings(STAGER + source)] == (["CSL102"] if followed else [])


PREFETCHED = """
class Trainer:
    def __init__(self):
        self.stager = Stager()

    def prefetch(self, batch):
        self.stager.stage(batch)

    def step(self):
        {before}
        return self.stager.staged * 2
"""


def test_an_objects_attribute_left_pending_by_one_method_is_where_the_others_start() -> None:
    """`prefetch` leaves the object's batch being copied on its stream; `step` may run next."""
    ((code, line, message),) = findings(STAGER + PREFETCHED.format(before="pass"))
    assert (code, line) == ("CSL102", 30)
    assert "on side stream 'self.stager.stream' in Trainer.prefetch()" in message
    assert findings(STAGER + PREFETCHED.format(before="self.stager.join()")) == []
