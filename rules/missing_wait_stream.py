"""CSL101: a side stream consumes a tensor the current stream produced, without waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from csan_lint.lint.edits import attach, current_stream_code, wait_before_block
from csan_lint.lint.facts import HazardKind, Missing, ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import message_fields
from csan_lint.runtime.kinds import READ_AFTER_WRITE, WRITE_AFTER_WRITE

_VALID = [
    Valid(
        """
        import torch

        def ring(blocks, streams):
            for i, block in enumerate(blocks):
                with torch.cuda.stream(streams[i % 2]):
                    out = torch.relu(block)
                with torch.cuda.stream(streams[(i + 1) % 2]):
                    total = out.sum()
            torch.cuda.synchronize()
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            y = x * 2
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                z = y + 1
            torch.cuda.current_stream().wait_stream(s)
            return z
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            done = torch.cuda.Event()
            y = x * 2
            done.record()
            with torch.cuda.stream(s):
                s.wait_event(done)
                z = y + 1
            done.wait(torch.cuda.current_stream())
            return y
        """
    ),
    Valid(
        """
        import torch

        y = torch.ones(4, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(torch.cuda.Stream()):
            z = y * 2
        """
    ),
    Valid(
        """
        import torch

        def forward(s):
            with torch.cuda.stream(s):
                a = torch.ones(4, device="cuda")
                b = a * 2
                b.add_(a)
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            n = x.size(0)
            shape = x.shape
            with torch.cuda.stream(s):
                y = x * 2
                z = torch.empty(n, *shape[1:], device="cuda")
        """
    ),
    Valid(
        """
        import torch.cuda as tc
        import torch

        def forward(x):
            side = tc.Stream()
            main = tc.current_stream()
            y = torch.relu(x)
            ctx = tc.StreamContext(side)
            side.wait_stream(main)
            with ctx:
                z = y * 2
            main.wait_stream(side)
            return z
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            y = torch.relu(x)
            total = y.sum().item()
            with torch.cuda.stream(s):
                z = y * total
            torch.cuda.current_stream().wait_stream(s)
            return z
        """
    ),
    Valid(
        """
        from mylib import stream

        def forward(x, s):
            y = x * 2
            with stream(s):
                z = y + 1
        """
    ),
    Valid(
        """
        import torch

        def fork(side):
            side.wait_stream(torch.cuda.current_stream())
            return side

        def forward(x, s):
            y = x * 2
            fork(s)
            with torch.cuda.stream(s):
                z = y + 1
            torch.cuda.current_stream().wait_stream(s)
            return z
        """
    ),
    Valid(
        """
        import torch

        def offload(s):
            host = torch.empty(4, pin_memory=True)
            with torch.cuda.stream(s):
                y = torch.ones(4, device="cuda")
                host.copy_(y, non_blocking=True)
            torch.cuda.current_stream().wait_stream(s)
            return host
        """
    ),
]

_INVALID = [
    Invalid(
        """
        import torch

        s = torch.cuda.Stream()
        x = torch.randn(8, device="cuda")
        with torch.cuda.stream(s):
            y = x * 2
        """,
        lines=(6,),
    ),
    Invalid(
        """
        import torch
        import torch.cuda as tc

        def step(model, batch, side):
            out = model(batch)
            with tc.stream(side):
                loss = out.sum()
            tc.current_stream().wait_stream(side)
            return loss
        """,
        lines=(7,),
    ),
    Invalid(
        """
        from torch.cuda import Stream, stream as s_ctx
        import torch

        buf = torch.zeros(4, device="cuda")
        copy_stream = Stream()
        with s_ctx(copy_stream):
            buf.add_(1)
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def forward(x, s, flag):
            y = x + 1
            if flag:
                s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                z = y * 2
            torch.cuda.current_stream().wait_stream(s)
            return z
        """,
        lines=(8,),
    ),
    Invalid(
        """
        import torch

        def run(batches, s):
            h = torch.zeros(4, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            for b in batches:
                with torch.cuda.stream(s):
                    out = h * 2
                h = torch.relu(b)
        """,
        lines=(8,),
    ),
    Invalid(
        """
        from torch import cuda
        import torch

        def forward(x):
            s = cuda.Stream()
            y = torch.relu(x)
            with cuda.stream(s):
                y.mul_(2)
            cuda.synchronize()
        """,
        lines=(8,),
    ),
    Invalid(
        """
        import torch

        def offload(layer, x, s):
            a = x * 2
            a = layer(a)
            with torch.cuda.stream(s):
                b = a.to("cpu", non_blocking=True)
            return b
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def add_one(x: torch.Tensor, s: torch.cuda.Stream) -> torch.Tensor:
            with torch.cuda.stream(s):
                y = x + 1
            torch.cuda.current_stream().wait_stream(s)
            return y
        """,
        lines=(5,),
    ),
    Invalid(
        """
        import torch

        def refill(x, s):
            buf = torch.empty_like(x)
            with torch.cuda.stream(s):
                buf.copy_(x)
            torch.cuda.current_stream().wait_stream(s)
            return buf
        """,
        lines=(6,),
    ),
    Invalid(
        """
        import torch

        def infer(context, x, stream):
            inp = torch.relu(x)
            context.set_tensor_address("input", inp.data_ptr())
            context.execute_async_v3(stream.cuda_stream)
        """,
        lines=(6,),
    ),
]


class MissingWaitStream(Rule):
    """
    ## What it does
    Flags a read or write, inside `with torch.cuda.stream(s):`, of a tensor whose last write
    was launched on the current stream before the block, when nothing orders `s` after that
    write: no `s.wait_stream(...)`, no `s.wait_event(e)` after `e.record()`, no host sync. Code
    the linter cannot read that is launched on `s` by its raw handle (a TensorRT engine's
    `execute_async_v3(s.cuda_stream)`) counts as such a block for every tensor whose address
    (`x.data_ptr()`) was handed out before it.

    ## Why is this bad?
    PyTorch's side streams are non-blocking: kernels on `s` do not wait for the current stream.
    The kernel in the block can read the tensor before it is written, or race with the write,
    and compute on stale or half-written data. There is no error, only wrong numbers, now and
    then.

    An allocation (`torch.empty`, `new_empty`) writes no data, but the caching allocator may
    hand it a block that work launched earlier on the allocating stream still uses: it is
    reported as "allocated on" when its first use on another stream is not ordered after the
    allocating stream's last launch before the allocation. Made on the caller's stream before
    any launch there in the function, that launch is the caller's: callers that all make the
    using stream wait before the call order it, as they order the caller's tensors (see Known
    problems).

    A wait written inside the block, `s.wait_stream(torch.cuda.current_stream())` within
    `with torch.cuda.stream(s):`, is `s` waiting on itself (there the current stream is `s`):
    it orders nothing and is reported at the wait. The fix waits before the block.

    ## Assumptions
    A function is entered on its caller's current stream, unless every call of it in the module
    is made inside `with torch.cuda.stream(S):` (`S` spelled alike, or a local bound only to
    streams the function can name: `self.s` on one path and the current stream on the other is
    `S` = "`self.s` or the current stream"), or outside any block in functions themselves
    entered on `S`, however deep (recursion included): then on `S`. Its tensor parameters were
    written by the caller before the block, on the current stream, when every call is in a
    block; otherwise on `S`, where the entered caller made them. A stream context some call in
    the module passes for a parameter (`f(x, torch.cuda.stream(s))`, not one of the stream
    current at the call) is entered by `with ctx:` in the function, on a stream of its own,
    `ctx.stream`. A stream
    chosen at run time (`s1 if c else s0`, an item of `[current_stream(), cp]` picked by a
    computed index) is each of its choices, and each is judged on its own path; a literal index
    picks its item. Inside a function `torch.cuda.default_stream()` may or may not be the stream
    current at entry (a caller may have made a side stream current): waiting on it orders
    nothing of the caller's stream, and work on the two never conflicts by itself; in a module
    body it is the current stream. A method named `current_stream()` of any object (a
    project's `ctx.current_stream()`) returns the current stream. DeepSpeed's
    `resolves_data_dependency()` and `is_synchronized_device()` are False, as on a CUDA device:
    only their CUDA branch is followed, and so is a device type compared with another
    accelerator's name (`self.device_type == "xpu"` is False). An ordering made under the `if`
    that binds a stream context on that path only (`ctx = torch.cuda.stream(s)`, else
    `nullcontext()`) holds wherever `ctx` is entered.

    A move whose result is dropped (`model.cuda()`, `model.half()`, `model.to(device)` as a
    statement, on a local name) is an `nn.Module`'s: it writes the module's parameters on the
    current stream, and those of the list a loop moves the items of (`for m in model:
    m.cuda()`). Building an object from the module (a DDP-like wrapper copies or broadcasts
    them) or calling it reads them; its own methods (`model.eval()`) launch nothing. A module
    kept in an attribute (`self.shard.to(device)`) is not followed.

    A function the module registers as a hook (`p.register_hook(fn)`,
    `p.register_post_accumulate_grad_hook(self._copy)`, a module's forward or backward hooks,
    through `functools.partial` too) gets its arguments, and their `.grad`, written by its caller
    on the stream current at the call: autograd or the module, not an assumption. So does the
    `backward` of a `torch.autograd.Function` subclass: its gradients (after `ctx`).
    A backward pass (`loss.backward()`, `torch.autograd.backward(...)`) writes every `.grad` on
    the stream current at the call, taken as the one its forward ran on (autograd runs each
    backward op on its forward op's stream): a gradient first used after one is that write.

    A stream kept in `__init__` from `current_stream()` (`self.compute`) and bound to nothing
    else there nor rebound by another method is the current stream of whoever calls the
    object's methods (a kept `default_stream()` is not: a caller on a side stream is the bug it
    hides); a `@property` that returns `current_stream()` is the stream current where it is read.

    Tests of one name against constants are path facts: an ordering made under
    `if method != 2:` holds in a later branch `elif method == 1:`, and a wait under
    `if self.use_streams:` orders a block entered on `self.s1 if self.use_streams else self.s0`
    (`x == c`, `x != c`, `x in (a, b)`, `x is None`, a bare `flag` or `not flag`, and `and`/`or`
    of them). A fact holds until the name is rebound in the function; a method that changes an
    attribute behind its back (`self.toggle()`) is assumed not to exist. A test of two streams'
    identity (`torch.cuda.current_stream() != s`, also through a name bound to it) is one too:
    where it says they are one stream, work launched on either before the test is ordered before
    later work on the other, so a wait skipped exactly there is not missing.

    ## Known problems
    A parameter annotated as a tensor (or an `nn.Parameter`, whose `.grad` it stands for) is
    taken as written by the caller on the stream current at entry, unless every call the
    module makes of it is made, on every path, after a wait of that stream for the caller's
    (`s.wait_stream(torch.cuda.current_stream())`, also in a helper it calls, with `s` named as
    the callee names it: `self.s`, a global, the stream argument; or a `synchronize()`), or every
    call gives it a value the caller holds no write of (an attribute, an item), or the side stream
    waited on an event of the object (`s.wait_event(self.ready)`) recorded by another method,
    taken as recorded after the caller's writes; linted callers also check their own
    arguments; unannotated parameters, attributes set elsewhere (`self.w`, `p.grad`)
    and globals may be anything and are assumed ready, except attributes in a function that
    makes a stream wait on `default_stream()`: that wait says they were written before the call,
    taken as on the stream current at entry (`bucket.grad_data` reduced on a stream that waited
    on the default stream only). A value returned by unknown code given
    a tensor is a tensor unless it is iterated or used as a container or an index; given none,
    only where the function uses it as one (`loss.backward()`, `torch.sum(out)`, an in-place
    method), not where it is only moved (`batch.to(device)`: a loader's batch is on the host). Items of one collection
    picked by computed keys (`streams[i % 2]`, `streams[(i - 1) % 2]`) may be one stream and
    are never reported against each other. Other conditions (`i > 1`, `len(x) < n`, a call)
    are not correlated: a wait under `if i > 0:` does not order a use under `if i >= 1:`.
    Ordering made by a called function is seen when
    it is defined in the same module (inherited and `super()` methods included) or imported
    from another file linted in the same run, and holds on every path that returns (a
    parameter given the caller's current stream is that stream there: a value it allocated and
    returned before `copy.wait_stream(compute)` is ordered before `copy` at the caller), and
    by a method of another object whose class is one of the module's and known from every binding
    of it (`self.loader = Loader()`, a parameter annotated `Loader`, an item of a `list[Loader]`
    or of `[Loader() ...]`), its attributes standing for the method's `self`; ordering made by a
    method of any other object (`plan.wait_current_stream()`), in C++ or by another thread is not
    seen; the runtime check dismisses such findings. What a called function that
    is seen computes and returns inside its own stream block, without a join, is written on
    that stream (torchrec's forward on one side stream, read by the backward on another). A
    collective's handle waited as an item of a list (`reqs[i - 1].wait()`) is taken as launched on the entry
    stream after all its work so far. A loop that only waits handles (`for req in reqs:
    req.wait()`) or streams (`for p in producers: s.wait_stream(p)`) waits them all, and an empty
    collection is taken to hold no work that needed waiting; a wait on a stream passed in, or on
    an item of a collection, may be a wait on the caller's stream, and orders its work. After
    such a loop over a named collection (`for s in self.streams:`), the waiter is ordered after
    every item of it the function names (`self.streams[0]`, `self.streams[i % n]`, the streams
    of a local `streams = [a, b]`), events alike, even where the loop may run zero times: an
    empty collection has no item any work ran on. Likewise a loop in which each item waits and
    does nothing else (`for s in self.streams: s.wait_stream(current_stream())`) orders every
    item of the collection after that wait, whichever key picks one later. A loop over a non-empty literal or `range` of
    literals runs at least once; any other loop may run zero times, and what its body orders is
    then not ordered.
    """

    code = "CSL101"
    name = "missing-wait-stream"
    summary = "side-stream work consumes a tensor produced on another stream with no ordering"
    message = (
        "'{tensor}' was {produced} on {other} and is {verb} on {stream} with no wait_stream/wait_event between them"
    )
    fix_title = "call `{stream_code}.wait_stream({other_code})` before {block}"
    confirmed_by = (READ_AFTER_WRITE, WRITE_AFTER_WRITE)

    VALID = _VALID
    INVALID = _INVALID

    self_wait_message = (
        "{stream} waits on the current stream, which inside its block is itself: the wait orders"
        " nothing, and {stream} is not ordered after the stream current before the block"
    )

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.hazards:
            if hazard.missing is Missing.FORK and hazard.kind in (
                HazardKind.READ_AFTER_WRITE,
                HazardKind.WRITE_AFTER_WRITE,
            ):
                fields = message_fields(hazard, current_stream_code(flow))
                finding = self.finding(flow.path, **flow.location(hazard), **fields)
                if hazard.no_op:
                    finding = replace(finding, message=self.self_wait_message.format(**fields))
                yield attach(finding, wait_before_block(flow, hazard))
