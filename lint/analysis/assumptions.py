"""What the analysis assumes where it cannot see: one named, documented, switchable entry each.

A value whose producer the function does not show (a parameter, an attribute set elsewhere),
the stream a function is entered on, or a shape of code taken as evidence of another stream:
each is an `Assumption` here (the evidence entries in lint/analysis/evidence.py, asked here
alike). The analysis asks `Assumptions.holds(name)` where it makes one,
and a hazard records the assumptions it rests on, so that a finding says what it took for
granted and a user can switch an assumption off (`[tool.csan-lint.assumptions]`,
`--assume NAME=off`). docs/analysis.md is generated from this table; the defaults are decided
by measuring each one on code we did not write (benchmarks/realworld/assumptions.py).
Pure data: no libcst, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from csan_lint.lint.analysis import entries, evidence
from csan_lint.lint.analysis.assumption import Assumption as Assumption

ANNOTATED_PARAMETERS_WRITTEN_BY_CALLER = "annotated-parameters-written-by-caller"
UNANNOTATED_PARAMETERS_WRITTEN_BY_CALLER = "unannotated-parameters-written-by-caller"
ATTRIBUTES_WRITTEN_BY_CALLER = "attributes-written-by-caller"
ENTRY_STREAM_FROM_CALLS = entries.ENTRY_STREAM_FROM_CALLS
KEPT_CURRENT_STREAM = entries.KEPT_CURRENT_STREAM
ENTRY_STREAM_IS_DEFAULT = entries.ENTRY_STREAM_IS_DEFAULT
MOVES_ALLOCATE = "moves-of-unplaced-tensors-allocate"
FACTORIES_ON_DEVICE = "factories-allocate-on-the-device"
UNRECORDED_EVENTS_FOLLOW_CALLERS = entries.UNRECORDED_EVENTS_FOLLOW_CALLERS
REBOUND_DATA_RELEASES = "rebound-data-releases-callers-memory"
DROPPED_GRADIENTS_RELEASE = "dropped-gradients-release"
UNSEEN_CALLEES_READ_DOWNLOADS = "unseen-callees-read-downloads"
UNSEEN_CALLEES_KEEP_ARGUMENTS = "unseen-callees-keep-arguments"
UNSEEN_CALLERS_READ_RETURNED_DOWNLOADS = "unseen-callers-read-returned-downloads"
COMPREHENDED_LISTS_ARE_TENSORS = "comprehended-lists-are-tensors"
UNSEEN_RESULTS_ARE_TENSORS = "unseen-results-are-tensors"
KINDS_FROM_NAMES = "kinds-from-names"
UNTOLD_NON_BLOCKING_FLAGS = "untold-non-blocking-flags-may-be-true"
FRESH_STREAMS_READ_CALLERS_DATA = "fresh-streams-read-callers-data"
NEVER_WAITING_STREAMS_READ_CALLERS_DATA = "never-waiting-streams-read-callers-data"
# The evidence entries' names, asked as the others are (lint/analysis/evidence.py):
DATA_SWAP = evidence.DATA_SWAP
DEFAULT_STREAM_JOIN = evidence.DEFAULT_STREAM_JOIN
STALE_STREAM_CAPTURE = evidence.STALE_STREAM_CAPTURE

PRODUCERS: tuple[Assumption, ...] = (
    Assumption(
        ANNOTATED_PARAMETERS_WRITTEN_BY_CALLER,
        "A parameter annotated as a tensor was written by the caller, on the stream current at entry.",
        "Its producer is the caller, whose last kernels ran on the stream it called from: a side "
        "stream that uses it needs a wait first. Quiet where every call the module makes of it "
        "follows, on every path, a wait of that stream for the caller's.",
        example="""\
import torch


def scale(x: torch.Tensor, side: torch.cuda.Stream) -> torch.Tensor:
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    return y
""",
        when_on=(("CSL101", 6),),
        when_off=(),
        default=True,
        rules=("CSL101", "CSL102", "CSL103", "CSL201"),
    ),
    Assumption(
        UNANNOTATED_PARAMETERS_WRITTEN_BY_CALLER,
        "An unannotated parameter the function uses as a tensor was written by the caller, on the "
        "stream current at entry.",
        "The same as for annotated parameters, for parameters whose kind the signature does not "
        "say but the body does (an in-place method, an arithmetic operand, a copy source). Off: "
        "such a parameter may be anything, and is taken as ready.",
        example="""\
import torch


def scale(x, side):
    with torch.cuda.stream(side):
        x.mul_(2)
    torch.cuda.current_stream().wait_stream(side)
""",
        when_on=(("CSL101", 6),),
        when_off=(),
        default=False,
        rules=("CSL101", "CSL201"),
    ),
    Assumption(
        ATTRIBUTES_WRITTEN_BY_CALLER,
        "An attribute first used in a function (`self.buf`, `p.grad`) was written before the "
        "call, on the stream current at entry.",
        "Off, an attribute is taken as ready unless the function makes a stream wait on "
        "`default_stream()`: that wait says the data it uses were written on the device before "
        "the call. On, every attribute a side stream uses first is taken as the caller's work.",
        example="""\
import torch


def reduce(param, out, side):
    with torch.cuda.stream(side):
        out.copy_(param.grad)
    torch.cuda.current_stream().wait_stream(side)
""",
        when_on=(("CSL101", 6),),
        when_off=(),
        default=False,
        rules=("CSL101", "CSL201"),
    ),
    Assumption(
        UNSEEN_CALLEES_READ_DOWNLOADS,
        "A callee the analysis cannot see (a method of an object of unknown class, a callable "
        "passed in), given host memory a non-blocking download may still be writing, reads it on "
        "the host.",
        "Host memory is read by whatever code is handed it: a Python helper, a C++ extension's "
        "entry point, another package's CPU optimizer. A callee the module defines is read "
        "instead (its body, with the argument as its parameter); a storing method "
        "(`append`, `put`) keeps the buffer without reading it. Off: a buffer handed to unseen "
        "code is no longer followed. On by default: on the development data it finds three known "
        "bugs (flashinfer's plan functions hand a non-blocking download of `indptr` to the JIT "
        "module's `plan`, which reads it on the CPU) and moves no finding of the corpus, the eleven "
        "repositories or torch's own package.",
        example="""\
import torch


def plan(indptr, module):
    indptr_host = indptr.to("cpu", non_blocking=True)
    return module.plan(indptr_host)
""",
        when_on=(("CSL301", 6),),
        when_off=(),
        default=True,
        rules=("CSL301",),
    ),
    Assumption(
        COMPREHENDED_LISTS_ARE_TENSORS,
        "A list of tensors a comprehension makes is one tensor value: its items written where the "
        "list was made, read where any item is read.",
        '`[torch.randn(n, device="cuda") for _ in r]` then `f(xs[i])` on a side stream reads '
        "memory the current stream wrote; an item assigned (`xs[i] = t`) replaces it, and the list "
        "is no longer followed. Off: such a list is a container, not followed. On by default since "
        "round 16: on the development data (corpus, held-out sets 1-9) it finds one more known bug "
        "(a flashinfer test's rank streams) and adds one plausible finding in the eleven "
        "repositories (TransformerEngine's per-step sequence lengths read under `cp_stream`, also in "
        "a fixed version of set 3); the three false ones in apex's distributed Adam went once an item "
        "of a list of streams bound to a name was read as that item.",
        example="""\
import torch


def ranks(n, streams, run):
    inputs = [torch.randn(n, device="cuda") for _ in streams]
    for i, stream in enumerate(streams):
        with torch.cuda.stream(stream):
            run(inputs[i])
""",
        when_on=(("CSL101", 8),),
        when_off=(),
        default=True,
        rules=("CSL101", "CSL201"),
    ),
    Assumption(
        UNSEEN_RESULTS_ARE_TENSORS,
        "What code the analysis cannot read returns is a tensor written where it is called, on the "
        "stream current there: when the call is given a tensor, or when the function goes on to "
        "use the result as one.",
        "A module's forward (`hidden = model(x)`), another package's function, a project function "
        "with no summary: its kernels run on the stream current at the call, so a side stream that "
        "uses the result needs a wait first. A use as a container or a number (iterated, keyed, "
        "compared against `None`) drops it. Off: such a result is no tensor, and nothing it takes "
        "part in is followed. On by default, measured in round 18 on the development data: off, "
        "the corpus loses a known bug (TorchRec's staged pipeline: 19 to 18 of 35), held-out "
        "sets 1-11 lose four (36 to 32 of 189) and 4 of 47 findings on fixed versions, and the "
        "eleven repositories lose 10 findings, 6 of them false (a dict of buffers, a list of "
        "async results, host-side checks, a project helper's wait) and 4 plausible, and gain one "
        "(a CSL201 at a line of TransformerEngine triaged false). 18 of the repositories' 98 "
        "findings rest on it.",
        example="""\
import torch


def run(model, inputs: torch.Tensor, side: torch.cuda.Stream):
    hidden = model(inputs)
    with torch.cuda.stream(side):
        out = hidden * 2
    torch.cuda.current_stream().wait_stream(side)
    return out
""",
        when_on=(("CSL101", 7),),
        when_off=(),
        default=True,
        rules=("CSL101", "CSL102", "CSL103", "CSL201"),
    ),
    Assumption(
        KINDS_FROM_NAMES,
        "A name nothing in the module binds says what it holds: one ending in `stream` is a stream "
        "(`with self.copy_stream:`), in `event`, `evt` or `stream` an event or a stream whose "
        "`record()`/`wait()` it is, `_device_handle` or `device_module` a device module, one with "
        "`device` or `accelerator` in it a device (`getattr(torch, device.type)`).",
        "Code that gets its streams from a base class, another module or a caller names them so; "
        "device-generic code (FSDP, DCP) reaches `torch.cuda` through a handle it names so. Off: "
        "such a name is of unknown kind, and a `with` on it enters no stream. A finding on a stream "
        "a name made one in the module says it rests on this (also where other code makes it "
        "one too); one reached through a device handle named so does not say it (the spelling "
        "is resolved before any stream exists). On by default, measured in round 18: off changes "
        "nothing on the corpus, on held-out sets 1-11 or on the eleven repositories but one "
        "finding on a fixed version of set 9, which goes; on torch's own package, off drops 10 of "
        "22 findings (symmetric memory's `backend_stream` 5, FSDP's collectives and runtime "
        "through `_device_handle` 5) and adds one.",
        example="""\
import torch


class Copier:
    def copy(self, x):
        x = x * 2
        with self.copy_stream:
            y = torch.relu(x)
        torch.cuda.current_stream().wait_stream(self.copy_stream)
        return y
""",
        when_on=(("CSL101", 8), ("CSL201", 10)),
        when_off=(),
        default=True,
        rules=("CSL101", "CSL102", "CSL103", "CSL201"),
    ),
    Assumption(
        UNSEEN_CALLERS_READ_RETURNED_DOWNLOADS,
        "A function no code of its module calls, returning host memory a non-blocking download may "
        "still be writing, hands it to callers that read it on the host.",
        "Its callers get the buffer and nothing to wait on (no event, no stream): they read it, "
        "unless they synchronize the whole device first. Where the module calls the function, the "
        "result is followed into each caller instead, and read where it reads it. Off: a "
        "returned download is judged only where the module's own code reads it.",
        example="""\
import torch


def offload(x):
    return x.to("cpu", non_blocking=True)
""",
        when_on=(("CSL301", 5),),
        when_off=(),
        default=False,
        rules=("CSL301",),
    ),
    Assumption(
        UNTOLD_NON_BLOCKING_FLAGS,
        "A `non_blocking=` flag whose value the code does not tell (a parameter no call of the "
        "module gives `True`, a call's result, an attribute) may be `True`: the copy may not block.",
        "A copy to the host with `non_blocking=flag` is written for callers or settings that pass "
        "`True` (`device_supports_non_blocking(d)`, `self.non_blocking`): on that path the host "
        "reads the buffer before the copy lands unless it synchronizes first. Where a call of the "
        "module gives the parameter `True`, or a default says it, the flag holds `True` whatever "
        "this says. Off: only a flag the code shows `True` makes a copy non-blocking. Off by "
        "default: on the development data (round 15) it finds no known bug more and flags one "
        "fixed version (petals' task pool), and in torch's own package it adds two false findings "
        "(FSDP's gradient offload, where the flag and the host read are on exclusive branches); "
        "none in tensordict, torchao or transformers.",
        example="""\
import torch


def to_host(x, flag):
    y = x.to("cpu", non_blocking=flag)
    return y.numpy()
""",
        when_on=(("CSL301", 6),),
        when_off=(),
        default=False,
        rules=("CSL301", "CSL302"),
    ),
    Assumption(
        FRESH_STREAMS_READ_CALLERS_DATA,
        "A stream the function creates is ordered after nothing until it waits: device data it "
        "did not see made (a tensor parameter, an attribute) read there may still be being written "
        "by the caller's stream.",
        "A new `torch.cuda.Stream()` starts with no ordering against the streams that exist: "
        "work entered on it before any `wait_stream`/`wait_event` runs concurrently with "
        "whatever the caller's stream still has queued, the producer of the function's inputs "
        "and the module's parameters (CUDA-graph warm-ups, prefetchers written without the "
        "fork). Unlike `unannotated-parameters-written-by-caller` and "
        "`attributes-written-by-caller`, it holds only on such a stream, where no ordering at "
        "all is possible; a parameter counts where it is annotated as a tensor or used as one, "
        "an attribute where it is used as one. A host sync before the block "
        "(`torch.cuda.synchronize()`) orders it. "
        "Off: a value whose producer is not seen is not judged there either. Off by default: on "
        "the development data (round 15) it finds no known bug more and flags the corpus's fixed "
        "apex prefetcher (its constructor's first preload); nothing in torch's own package, "
        "tensordict, torchao or transformers.",
        example="""\
import torch


def warm_up(model, x):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = model(torch.relu(x))
    torch.cuda.current_stream().wait_stream(side)
    return y
""",
        when_on=(("CSL101", 7),),
        when_off=(),
        default=False,
        rules=("CSL101",),
    ),
    Assumption(
        NEVER_WAITING_STREAMS_READ_CALLERS_DATA,
        "A stream the module makes and never makes wait is ordered after nothing: device data a "
        "function did not see made (a tensor parameter, an attribute) read there may still be "
        "being written by the caller's stream.",
        "`self.stream = torch.cuda.Stream()` that no code of the module makes wait (no "
        "`wait_stream`/`wait_event` on it, no `current_stream().wait_stream(...)` inside a block "
        "that enters it, never handed to a helper) runs whatever is entered on it concurrently "
        "with the caller's stream: a private stream for an engine or a model, reading inputs the "
        "caller just produced. As `fresh-streams-read-callers-data`, for a stream made elsewhere "
        "in the module; the source of a copy to the device (`x.cuda()`) is host memory and not "
        "judged. Off: a value whose producer is not seen is not judged there.",
        example="""\
import torch


class Runner:
    def __init__(self, model):
        self.model = model
        self.stream = torch.cuda.Stream()

    def __call__(self, x):
        with torch.cuda.stream(self.stream):
            y = self.model(torch.relu(x))
        torch.cuda.current_stream().wait_stream(self.stream)
        return y
""",
        when_on=(("CSL101", 11),),
        when_off=(),
        default=False,
        rules=("CSL101",),
    ),
    Assumption(
        REBOUND_DATA_RELEASES,
        "Rebinding `x.data` releases the device memory `x` held, which the caller allocated on the "
        "stream current at entry.",
        "`p.data = v` drops `p`'s old storage: where this function did not allocate it, it is "
        "taken as the caller's device memory with no other reference, so a use of it on another "
        "stream must be ordered before the entry stream, or recorded, before the rebinding (as "
        "for `x.untyped_storage().resize_(0)`, which frees it whatever else refers to it). Off: "
        "only memory the function allocated is judged when a rebinding drops it. Off by default: "
        "measured on the development data it finds one known bug (DeepSpeed's offload of the fp32 "
        "master partition) and costs two false findings (FairScale's FSDP, whose parameters' old "
        "memory is still held by their shards, in the corpus and in the whole repository).",
        example="""\
import torch


def offload(p, host, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        host.copy_(p.data, non_blocking=True)
    p.data = host
""",
        when_on=(("CSL201", 7),),
        when_off=(),
        default=False,
        rules=("CSL201",),
    ),
    Assumption(
        UNSEEN_CALLEES_KEEP_ARGUMENTS,
        "Code the analysis cannot see keeps the tensors it is given alive after it returns.",
        "A tensor handed to an unknown function or method (`self.policy(batch)`) may be stored "
        "there, so its release is no longer this function's: nothing is judged when its name "
        "goes. Off: only a container's storing methods and a constructor keep what they are "
        "given; a tensor passed to other unknown code is released with its last name here, and "
        "a use on another stream before that needs a `record_stream`. Off found none more of the "
        "87 known bugs of held-out sets 1-6 and added 10 findings on their fixed versions.",
        example="""\
import torch


def infer(policy, staging, copy_stream, compute_stream):
    with torch.cuda.stream(copy_stream):
        batch = staging.to("cuda", non_blocking=True)
    compute_stream.wait_stream(copy_stream)
    with torch.cuda.stream(compute_stream):
        out = policy(batch)
    torch.cuda.current_stream().wait_stream(compute_stream)
    return out
""",
        when_on=(),
        when_off=(("CSL201", 9),),
        default=True,
        rules=("CSL201",),
    ),
    Assumption(
        DROPPED_GRADIENTS_RELEASE,
        "Rebinding `p.grad` releases the gradient it held, allocated on the stream current at entry.",
        "`p.grad = None` drops the reference autograd's gradient lives by (what "
        "`zero_grad(set_to_none=True)` relies on to free it): where this function did not "
        "allocate the gradient, autograd (or the caller) did, on the stream the function is "
        "entered on, so a use of it on another stream must be recorded (`record_stream`) or "
        "ordered before the entry stream before the rebinding. Off: only gradients the function "
        "allocated are judged when a rebinding drops them.",
        example="""\
import torch


def offload_grads(model, host, side):
    def hook(p):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            host.copy_(p.grad, non_blocking=True)
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
""",
        when_on=(("CSL201", 8),),
        when_off=(),
        default=True,
        rules=("CSL201",),
    ),
    Assumption(
        MOVES_ALLOCATE,
        "A `.to(device)` or `.cuda()` of a tensor whose place the code does not say makes a new "
        "tensor, allocated on the stream current there.",
        "PyTorch returns the tensor itself where it is on that device already. A tensor the "
        "code made in host memory (a pinned buffer, `.cpu()`, a factory without `device=`) is "
        "moved for certain, with no assumption. Off, a move of any other tensor may be its "
        "receiver: its allocating stream is not known, and a `record_stream` on the stream "
        "current at the move is not judged. On by default, measured in round 19 on the "
        "development data: off, the corpus loses three known bugs (timm's two prefetch loaders, "
        "diffusers' group offloading: batches and weights the DataLoader or the offloader left in "
        "host memory), held-out sets 1-11 lose one (tokenspeed), the fixed versions have one "
        "finding fewer (fairscale), and the eleven repositories lose 4 true findings (timm).",
        example="""\
import torch


def load(batch: torch.Tensor, side: torch.cuda.Stream) -> torch.Tensor:
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        batch = batch.to("cuda", non_blocking=True)
        batch.record_stream(side)
        out = batch * 2
    torch.cuda.current_stream().wait_stream(side)
    return out
""",
        when_on=(("CSL201", 8),),
        when_off=(),
        default=True,
        rules=("CSL201",),
    ),
    Assumption(
        FACTORIES_ON_DEVICE,
        "A factory that names no device (`torch.zeros(n)`, `torch.arange(n)`) allocates on the GPU.",
        "PyTorch allocates it on the default device, the host, unless the program moved the "
        'default (`torch.set_default_device("cuda")`, `with torch.device("cuda"):`), which the '
        "analysis does not read. On, both interpreters take such a tensor for device memory, "
        "allocated and written on the stream current there; off, for host memory that no "
        "stream writes, as PyTorch's default says (a non-blocking copy into it is a download). "
        "Off by default, PyTorch's own rule. Measured in round 20 on the development data (the "
        "corpus, held-out sets 1-13, the eleven repositories), on and off give the same findings, "
        "and so did the old split (the stream analysis read device memory, the host analysis host "
        "memory).",
        example="""\
import torch


def positions(side: torch.cuda.Stream) -> torch.Tensor:
    with torch.cuda.stream(side):
        index = torch.arange(8)
    return index + 1
""",
        when_on=(("CSL102", 7), ("CSL201", 7)),
        when_off=(),
        default=False,
        rules=("CSL101", "CSL102", "CSL103", "CSL201", "CSL301"),
    ),
)

ASSUMPTIONS: tuple[Assumption, ...] = (*PRODUCERS, *entries.ENTRIES, *evidence.EVIDENCE)

BY_NAME: Mapping[str, Assumption] = {assumption.name: assumption for assumption in ASSUMPTIONS}


@dataclass(frozen=True)
class Assumptions:
    """The assumptions switched away from their defaults in one run."""

    on: frozenset[str] = frozenset()
    off: frozenset[str] = frozenset()

    def holds(self, name: str) -> bool:
        assert name in BY_NAME, name
        return name in self.on or (BY_NAME[name].default and name not in self.off)

    @classmethod
    def from_switches(cls, switches: Iterable[tuple[str, bool]]) -> Assumptions:
        """Later switches win; each name must be in the table (the caller reports which is not)."""
        chosen = dict(switches)
        return cls(
            frozenset(name for name, value in chosen.items() if value),
            frozenset(name for name, value in chosen.items() if not value),
        )

    def switched(self, switches: Iterable[tuple[str, bool]]) -> Assumptions:
        """These switches on top of this run's."""
        mine = [*((name, True) for name in self.on), *((name, False) for name in self.off)]
        return Assumptions.from_switches([*mine, *switches])

    def key(self) -> list[str]:
        """A stable spelling for the cache key: only what differs from the defaults."""
        return sorted(f"{name}={'on' if self.holds(name) else 'off'}" for name in self.on | self.off)


DEFAULT_ASSUMPTIONS = Assumptions()
