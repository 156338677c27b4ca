"""CSL201: a tensor used on a side stream is released before that use is ordered or recorded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import libcst as cst

from csan_lint.lint.edits import (
    Fix,
    attach,
    binds,
    current_stream_code,
    insertion,
    is_name,
    module_context,
    scope,
    spelled_stream,
)
from csan_lint.lint.facts import CURRENT, Hazard, HazardKind, ModuleFlow
from csan_lint.lint.model import Edit, Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import message_fields
from csan_lint.runtime.kinds import FREE_IN_USE

_VALID = [
    Valid(
        """
        import torch

        def producer(s, out):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
            x.record_stream(s)
            del x
        """
    ),
    Valid(
        """
        import torch

        def producer(s, out):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
                x.record_stream(torch.cuda.current_stream())
        """
    ),
    Valid(
        """
        import torch

        def producer(s, out):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
            torch.cuda.current_stream().wait_stream(s)
            del x
        """
    ),
    Valid(
        """
        import torch

        def producer(s):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = x * 2
            torch.cuda.current_stream().wait_stream(s)
            return x, y
        """
    ),
    Valid(
        """
        import torch

        class Cache:
            def fill(self, s):
                x = torch.randn(8, device="cuda")
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    self.total = x.sum()
                self.keep = x
        """
    ),
    Valid(
        """
        import torch

        def producer(s, out):
            with torch.cuda.stream(s):
                x = torch.randn(8, device="cuda")
                out.copy_(x)
                del x
        """
    ),
    Valid(
        """
        import torch

        def producer(batches, s):
            for b in batches:
                x = b.to("cuda")
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    y = x.sum()
                x.record_stream(s)
            torch.cuda.current_stream().wait_stream(s)
        """
    ),
    Valid(
        """
        import torch

        def settle(side):
            side.wait_stream(torch.cuda.current_stream())

        def forward(x, s):
            with torch.cuda.stream(s):
                y = torch.relu(x)
            torch.cuda.current_stream().wait_stream(s)
            z = y * 2
            settle(s)
            return z
        """
    ),
    Valid(
        """
        import torch

        def offload(side):
            x = torch.ones(8, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
            del x  # the block goes back to the current stream's pool...
            torch.cuda.current_stream().wait_stream(side)  # ...which waits before allocating again
            z = torch.zeros(8, device="cuda")
            return y, z
        """
    ),
    Valid(
        """
        import torch

        def step(layers, prefetch_stream):
            with torch.cuda.stream(prefetch_stream):
                layer = layers[0].to("cuda", non_blocking=True)
            torch.cuda.current_stream().wait_stream(prefetch_stream)
            out = layer * 2
            layer = None
            # the prefetch stream may reuse the layer's block: it waits for its use first
            prefetch_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(prefetch_stream):
                layers.append(layers[1].to("cuda", non_blocking=True))
            return out
        """
    ),
    Valid(
        """
        import torch

        def producer(s, out):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
            x = torch.zeros(8, device="cuda")  # allocated before the old block is released
            torch.cuda.current_stream().wait_stream(s)
            return x
        """
    ),
]

_INVALID = [
    Invalid(
        """
        import torch

        def offload(side):
            x = torch.ones(8, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
            del x
            z = torch.zeros(8, device="cuda")
            torch.cuda.current_stream().wait_stream(side)
            return y, z
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def offload(side, sync):
            x = torch.ones(8, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
            del x
            if sync:
                torch.cuda.current_stream().wait_stream(side)
            z = torch.zeros(8, device="cuda")
            return y, z
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def step(layers, prefetch_stream):
            with torch.cuda.stream(prefetch_stream):
                layer = layers[0].to("cuda", non_blocking=True)
            torch.cuda.current_stream().wait_stream(prefetch_stream)
            out = layer * 2
            layer = None
            with torch.cuda.stream(prefetch_stream):
                layers.append(layers[1].to("cuda", non_blocking=True))
            return out
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def producer(batches, s):
            for b in batches:
                x = b.to("cuda")
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    y = x.sum()
            torch.cuda.current_stream().wait_stream(s)
        """,
        lines=(8,),
    ),
    Invalid(
        """
        import torch

        def producer(s, out):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def producer(s, out, keep):
            x = torch.randn(8, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
            if keep:
                x.record_stream(s)
            del x
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def load(batch, s):
            with torch.cuda.stream(s):
                x = batch.to("cuda", non_blocking=True)
            torch.cuda.current_stream().wait_stream(s)
            return x
        """,
        lines=(7,),
    ),
]


class MissingRecordStream(Rule):
    """
    ## What it does
    Flags the use, on a stream other than the one that allocated it, of a tensor created in
    the function whose last reference then dies (`del x`, rebinding the name, the next loop
    iteration, the function returning without the tensor escaping) and whose block may be
    handed out again before the allocating stream is ordered after that use, without
    `x.record_stream(stream)`. Also flags
    `x.record_stream(s)` where `s` is the stream that allocated `x` in the function (inside
    `with torch.cuda.stream(s):`, `s` is `current_stream()`): the call protects nothing.

    ## Why is this bad?
    PyTorch's caching allocator ties a block to the stream that allocated it. When the last
    reference dies the block is handed to the next allocation on that stream at once, while the
    other stream's kernel may still be reading or writing it: a use-after-free that corrupts the
    new tensor or the result, silently.

    ## Assumptions
    The caching allocator hands a block released on its allocating stream to that stream's
    next allocation at once: every use on another stream must be ordered before the allocating
    stream, or recorded, by the time anything may be allocated after the last reference dies
    (rebinding, `del`, return). Waits and syncs right after the release (`del x` then
    `torch.cuda.current_stream().wait_stream(s)`, with only `del`s, waits, syncs and `pass`
    between) order the reuse; any other statement may allocate (a branch or a loop is taken to,
    so a wait under `if` does not count), and so may the caller once the function returns. A function
    called `record_stream(t, s)` (or named with that suffix, FSDP's
    `_no_dispatch_record_stream`) records like `t.record_stream(s)`; a record of a view of `t`
    (`t.view(-1)`, `t[0]`, `t.data`) records `t`'s block. A name that is None on a
    path holds no tensor there: `if x is not None: x.record_stream(s)` records every tensor. A
    `record_stream` made on the branch that alone binds the stream (`if overlap: stream = side;
    x.record_stream(stream)`, `else: stream = current_stream()`) holds wherever the stream is
    used through that name; the side stream is assumed not used directly on the other branch.

    ## Known problems
    Only tensors allocated in the function by an assignment are followed, plus tensors freed
    explicitly with `x.untyped_storage().resize_(0)` (allocated, when not seen, by the current
    stream). A tensor passed to unknown code, stored in an attribute or a container, or aliased
    by a view is assumed to escape and is not reported, although the release may still come too
    early. A tensor a method allocates from the pool of a stream kept on `self` (`with
    torch.cuda.stream(self.copy):`, the stream not waiting there for the caller's first) and
    keeps in an attribute (`self.buf = ...`) is followed into the class's public methods: one
    that uses it on another stream and then drops it (`self.buf = None`, `del self.buf`) is
    reported there, as a local would be. A tensor returned or yielded (or a view of it, `x[0]`,
    `x.view(n)`; not `x.reshape(n)`, which may copy) is taken as used and then released by the
    caller on its own stream: allocated on another stream (also in another method, through
    `self`) and handed over with no `record_stream` for the caller's stream, it is reported at
    the `return`/`yield`, even where the caller would keep it alive until the allocating stream
    waits for it; so is one stored in an attribute of an argument (not `self`) or of an item
    iterating one gives (`it.feature = t`), where it is stored. A tensor stored in a container
    on `self` and handed out by another method is not followed. What a static or class method
    of the module called on its class (`Helper.reload(...)`) returns is memory made by the call
    where the helper allocates it on a path the arguments allow (a parameter it tests `is None`
    passed as `None`, as a name bound to `None` anywhere in the caller, or left to its
    default). The items of a list passed in by
    the caller (`for buf in bucket:`, also through `zip`/`enumerate`) are the caller's,
    allocated on its stream outside any block (also where the function is entered on a side
    stream): one written on a side stream and still pending when the function returns, never
    `record_stream`ed here (on any path) and not joined (here, or by every caller in the module:
    see CSL102), is reported, since the caller may drop the list at once (DeepSpeed's gradient
    buckets); an item only read there is not (the caller may keep it). `t.record_stream(s)` with
    `s` the allocating stream protects nothing, and the release is reported as if no record had
    been made; such a record is reported where it stands only for memory the function certainly
    allocated (a torch op or a tensor method bound to the name, `p.data` included), on the
    stream current at that binding on the last path interpreted, and only where the memory may
    be used on another stream: kept in an attribute, or allocated inside a stream block (a local
    made on the entry stream is used on that stream alone). A tensor kept beside a recorded one
    may have been made on the stream that uses it after all (the record speaks for its own
    tensor only): that finding is false. Objects that hold tensors (a `KeyedTensor` used
    through its methods) are not followed. Rebinding `x.data` releases the
    memory `x` held, like `del`. By `data-swap-release`, weights a method swaps in on a stream
    (`p.data = host.to(dev, non_blocking=True)` in its block, with no wait of that stream on the
    caller's before it) are memory of that stream's pool: another method that swaps them out
    (`p.data = torch.empty_like(...)`, outside any `with`, in a `for` over `m.parameters()`,
    `m.buffers()` or a container on `self`, its keys and values included) is reported at the
    rebinding, unless it has a host sync, a wait or a `record_stream` anywhere in its body.
    Which tensors the two methods reach is not compared, and a `record_stream` made at the
    swap-in is not taken to protect them (it may be made on some paths only)."""

    code = "CSL201"
    name = "missing-record-stream"
    summary = "a tensor used on a non-allocating stream is released before that stream is ordered or recorded"
    message = (
        "'{tensor}' was allocated on {other} and used on {stream}, then {release} before {other} waited for that use"
    )
    fix_title = (
        "call `{tensor}.record_stream({stream_code})` after the use, "
        "or `{other_code}.wait_stream({stream_code})` before releasing '{tensor}'"
    )
    confirmed_by = (FREE_IN_USE,)

    VALID = _VALID
    INVALID = _INVALID

    self_record_message = (
        "'{tensor}' is recorded on {other}, the stream that allocated it: record_stream there protects"
        " nothing, and the tensor's uses on other streams are left unprotected"
    )
    self_record_fix = "record the stream that uses '{tensor}' instead of {other}"

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.hazards:
            if hazard.kind is HazardKind.FREE_IN_USE and hazard.no_op:
                fields = message_fields(hazard, current_stream_code(flow))
                finding = self.finding(flow.path, **flow.location(hazard), **fields, release="")
                yield replace(
                    finding,
                    message=self.self_record_message.format(**fields),
                    fix=self.self_record_fix.format(**fields),
                )
            elif hazard.kind is HazardKind.FREE_IN_USE:
                finding = self.finding(
                    flow.path,
                    **flow.location(hazard),
                    **message_fields(hazard, current_stream_code(flow)),
                    release=_release(flow, hazard),
                )
                # a loop item of the caller's: recorded after the block, the name is the last item only
                yield finding if hazard.dropped else attach(finding, record_after_use(flow, hazard))


def _release(flow: ModuleFlow, hazard: Hazard) -> str:
    if hazard.dropped:
        return f"left to the caller, who may drop it at once, when '{hazard.function}' returns (no record_stream)"
    if hazard.returned:
        return f"released by the caller (handed over at line {flow.line(hazard.access.node)} with no record_stream)"
    if hazard.release is None:
        return f"released when '{hazard.function}' returns"
    if isinstance(hazard.release, cst.Call):
        return f"freed by resizing its storage to 0 at line {flow.line(hazard.release)}"
    verb = "deleted" if isinstance(hazard.release, cst.Del) else "rebound"
    return f"{verb} at line {flow.line(hazard.release)}"


def record_after_use(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """`t.record_stream(s)` right after the block (or statement) that used `t` on `s`,
    so the allocator waits for `s` before reusing `t`'s memory. Not when `t` is released inside
    that block: after it the name no longer means the tensor that was used.

    A statement that leaves the function (`return t + 1`) gets the call just before it: the
    allocator waits for the recorded streams' work up to the free, wherever the call stands."""
    anchor = hazard.access.span_node
    stream, tensor = hazard.access.stream, hazard.tensor
    if not (is_name(tensor) and (stream == CURRENT or is_name(stream))):
        return None
    if (
        isinstance(anchor, cst.With)
        and stream == CURRENT
        or not isinstance(anchor, (cst.With, cst.SimpleStatementLine))
    ):
        return None
    where = flow.range(anchor)
    line = where.end.line + 1
    if _leaves(anchor) or hazard.returned:  # before the tensor is handed over
        if isinstance(anchor, cst.With):
            return None
        line = where.start.line
    if hazard.release is not None and where.start.line <= flow.line(hazard.release) <= where.end.line:
        return None
    context = module_context(flow.module)
    if isinstance(anchor, cst.With) and (binds(anchor, stream) or binds(anchor, tensor)):
        return None
    spelled = spelled_stream(context, stream)
    if spelled is None:
        return None
    edit = Edit(line, where.start.line, f"{tensor}.record_stream({spelled.code})", scope(flow, anchor))
    return insertion(flow, context, edit, spelled)


def _leaves(statement: cst.With | cst.SimpleStatementLine) -> bool:
    """Control never reaches the line after the statement: it ends in `return`, `raise`..."""
    last: cst.CSTNode = statement
    while isinstance(last, cst.With):
        last = last.body if isinstance(last.body, cst.SimpleStatementSuite) else last.body.body[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return isinstance(last.body[-1], (cst.Return, cst.Raise, cst.Break, cst.Continue))
    return False
