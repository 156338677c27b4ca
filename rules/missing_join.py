"""CSL102: a tensor produced on a side stream is used on another stream without joining first."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from csan_lint.lint.analysis.tokens import event_name
from csan_lint.lint.edits import attach, current_stream_code, join_before_use
from csan_lint.lint.facts import Hazard, HazardKind, Missing, ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import message_fields
from csan_lint.runtime.kinds import READ_AFTER_WRITE, WRITE_AFTER_WRITE

_VALID = [
    Valid(
        """
        import torch

        def forward(x, s):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = x * 2
            torch.cuda.current_stream().wait_stream(s)
            return y + 1, y
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            ready = torch.cuda.Event()
            with torch.cuda.stream(s):
                y = x * 2
                ready.record()
            torch.cuda.current_stream().wait_event(ready)
            return y + 1, y
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            with torch.cuda.stream(s):
                y = x * 2
                e = s.record_event()
            e.wait()
            return y + 1, y
        """
    ),
    Valid(
        """
        from torch.cuda import synchronize
        import torch

        def forward(x, s):
            with torch.cuda.stream(s):
                y = x * 2
            synchronize()
            return y + 1, y
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            with torch.cuda.stream(s):
                y = x * 2
            s.synchronize()
            return y.sum()
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            main = torch.cuda.default_stream()
            with torch.cuda.stream(s):
                y = x * 2
            main.wait_stream(s)
            with torch.cuda.stream(main):
                z = y + 1
            torch.cuda.current_stream().wait_stream(main)
            return z
        """
    ),
    Valid(
        """
        import torch

        def forward(x, s):
            with torch.cuda.stream(s):
                y = x * 2
                total = y.sum().item()
            return y, total
        """
    ),
    Valid(
        """
        import torch

        def join(side, stats):
            stats.joins += 1
            torch.cuda.current_stream().wait_stream(side)

        def forward(x, s, stats):
            with torch.cuda.stream(s):
                y = x * 2
            join(s, stats)
            return y + 1
        """
    ),
    Valid(
        """
        import torch

        class Prefetcher:
            def __init__(self, loader):
                self.loader = iter(loader)
                self.stream = torch.cuda.Stream()
                self.preload()

            def preload(self):
                batch = next(self.loader)
                with torch.cuda.stream(self.stream):
                    self.next_batch = batch.cuda(non_blocking=True)

            def next(self):
                torch.cuda.current_stream().wait_stream(self.stream)
                batch = self.next_batch
                self.preload()
                return batch.float()
        """
    ),
    Valid(
        """
        import torch

        def prefetch(x, s):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = x * 2
                done = torch.cuda.Event()
                done.record()
            while not done.query():
                pass
            return y.sum()
        """
    ),
    Valid(
        """
        import torch

        def reduce(grads, s):
            for g in grads:
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    g.div_(2)
                torch.cuda.current_stream().wait_stream(s)
                total = sum([g.sum() for g in grads])
            return total
        """
    ),
]

_INVALID = [
    Invalid(
        """
        import torch

        def forward(x, s):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = x * 2
            return y + 1
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        def forward(x, s, join):
            with torch.cuda.stream(s):
                y = x * 2
            if join:
                torch.cuda.current_stream().wait_stream(s)
            return y + 1
        """,
        lines=(8,),
    ),
    Invalid(
        """
        import torch

        def accumulate(xs, s):
            out = torch.zeros(4, device="cuda")
            for x in xs:
                total = out + x
                with torch.cuda.stream(s):
                    out = torch.relu(x)
            torch.cuda.current_stream().wait_stream(s)
            return out
        """,
        lines=(6,),
    ),
    Invalid(
        """
        import torch

        def forward(a, b):
            with torch.cuda.stream(a):
                y = torch.ones(4, device="cuda")
            with torch.cuda.stream(b):
                z = y * 2
            torch.cuda.synchronize()
            return z
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        class Prefetcher:
            def load(self, batch):
                with torch.cuda.stream(self.copy_stream):
                    self.buf = batch.to("cuda", non_blocking=True)
                return self.buf.float()
        """,
        lines=(7,),
    ),
    Invalid(
        """
        import torch

        class Prefetcher:
            def __init__(self, loader):
                self.loader = iter(loader)
                self.stream = torch.cuda.Stream()
                self._preload()

            def _preload(self):
                batch = next(self.loader)
                with torch.cuda.stream(self.stream):
                    self.next_batch = batch.cuda(non_blocking=True)

            def next(self):
                batch = self.next_batch
                self._preload()
                return batch.float()
        """,
        lines=(17,),
    ),
    Invalid(
        """
        import torch

        def fill(buf, side):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                buf.copy_(torch.ones(4, device="cuda"))

        def forward(s):
            buf = torch.empty(4, device="cuda")
            fill(buf, s)
            return buf.sum()
        """,
        lines=(11,),
    ),
    Invalid(
        """
        import torch

        class Reducer:
            def finish(self):
                torch.cuda.default_stream().wait_stream(self.comm_stream)
        """,
        lines=(5,),
    ),
]


class MissingJoin(Rule):
    """
    ## What it does
    Flags a read or write of a tensor last written on a side stream (inside
    `with torch.cuda.stream(s):`) from another stream — usually the current stream after the
    block — when nothing orders that stream after the write: no
    `torch.cuda.current_stream().wait_stream(s)`, no event wait, no host sync (a `synchronize()`,
    or an `e.query()` seen returning True: in the branch it guards, after `while not e.query():`).
    Loops are followed around: a result produced on `s` at the end of one iteration and used at the
    start of the next counts.
    A callable that fixes the current stream when it is built and runs later is CSL104's
    (`stale-stream-capture`; reported as CSL102 before).

    ## Why is this bad?
    Leaving the `with` block does not wait for the work launched in it. The current stream
    goes on at once and can read the result before the side stream has written it.

    ## Assumptions
    Every use after the block may run before the side stream's work: a read, a write, passing
    the tensor to unknown code. A call of a method that rebinds `self.x` gives `self.x` a new
    tensor made on the method's stream; the caller's old one is not written. `work.wait()` on
    an async collective's handle makes the current stream wait for the collective. No tensor has
    `.wait()`: a value waited so (a result of unknown code) is a handle, which no kernel reads.

    A stream kept in `__init__` from `current_stream()` (`self.compute`) and rebound by no other
    method is the current stream of whoever calls the object's methods (a kept `default_stream()`
    is not: a caller on a side stream is the bug it hides).

    A join into the default stream is not a join of the caller's stream: what a function leaves
    pending and hands back is used next on the stream current when it was entered, the default
    stream only if its caller runs there, not under a stream context or a CUDA-graph capture. A
    wait of the default stream (`default_stream().wait_stream(s)`, `.wait_event(e)`, also through
    a name, or a `self.x` kept from `default_stream()` in `__init__` and rebound by no other
    method) on a side stream or its event, made on the caller's stream, is reported at the wait,
    also in a function with no stream block of its own; the fix waits on `current_stream()`.
    Callers in the linted code that call the function outside any stream block prove nothing:
    their own callers may be on a side stream. Not reported where the default stream is current
    by construction (inside `with stream(default_stream()):`, after `set_stream(default_stream())`,
    in a module's body, in a function every call of which is made in such a block), where the
    function makes the default stream current anywhere in its body (a block on it, `set_stream`:
    the wait is taken to serve the work there), where the caller's stream waits on the same stream
    or event, or the host syncs with it, on every path to the return, nor for a wait on a stream
    that may be the caller's (the current one, a loop's item, a stream chosen at run time) or on an
    event recorded here on the caller's stream. A stream passed in as a parameter is taken as a
    side stream there, and an event of unknown origin as recorded on one.

    ## Known problems
    Handing a tensor back (`return y`) is a use by the caller on its stream: a tensor still being
    written on a side stream when a method or module-level function returns it is reported at the
    return, unless it is joined first (a join into the default stream is reported at the wait
    instead, see above), recorded in an event the caller can reach, handed back beside an event,
    a stream or any other object that may hold one, or on a stream the caller passed in or a local
    the analysis cannot tell from the caller's stream; not for a function nested in another (a hook: the
    framework keeps what it returns). A caller in the same module (or in another file linted in the
    same run) starts from what the call returns as written on the callee's stream when the callee
    computed it inside its own stream block and did not join (each item of a returned tuple on its
    own, `pair[0]` of `pair = f()` too, a result of unknown code taken as a tensor): its use on
    another stream with no wait is reported at the use, or at its own return, and not again at the
    callee's; other callers are not seen. An event returned beside it (`return out, done`) is
    followed: the caller's wait on it (`done.wait()`, `wait_event(pair[1])`) orders the tensor. The
    items of a tuple a call returned, kept in a list or dict on `self` (`result = self._run(x)`,
    `self.outputs[i] = result`), are followed into the public methods of the class and the methods
    they call as `self.m()`, as one item standing for all, to the return that hands them on; an
    event kept beside them there is not followed. A parameter on which `record_stream` is called
    holds tensors whatever its type says.
    Side-stream writes to a parameter, or to an item of the caller's data bound to a name
    (`buf = self.buffers[k]`, also in a nested function, or a tensor a method of an attribute of
    `self` or of a parameter hands out: `buf = self.store.get(k)`, not a tensor method's result), or
    to a module's tensor a `for` reaches (`for p in m.parameters()`, `m.buffers()`, the items of a
    list on `self`; `p.data = v` writes `p`, which stays the caller's and now holds `v`'s memory), or
    to a module kept on `self` that the side stream moves in place without blocking
    (`self.shard.to(device, non_blocking=True)`: its parameters, reported at that return and not
    again where other methods run it; its `.train()`, `.parameters()` launch nothing; a blocking
    move returns once copied), still pending when a function returns are reported, unless every
    function of the module that calls it
    joins that stream (`wait_stream(s)` spelled alike, or a `synchronize()`, anywhere in its body:
    where in the body is not checked), the stream is one the caller passed in, is recorded (on any
    path) in an event stored on `self` or passed in, or anything but tensors is returned (an event,
    a stream, a future), or the function made the current stream wait for that stream at its entry,
    before its own work there (the previous call's work is joined by the next call: DeepSpeed's
    reducers); pending reads (the caller's next overwrite) are CSL103's. A write to what such a
    getter hands out is also one to any item of its object (`self.store[]`), carried to the callers
    like a write to `self.x`. A stream chosen by if/else (`stream = self.s` on one branch,
    `current_stream()` on the other) is judged on each choice. `work.wait()` on the handle
    of an async collective orders the current stream after it, as `s.record_event().wait()` orders
    it after `s`; a handle kept in a list and waited on through a loop is not followed. A join done
    by a called function is seen when that function is defined in the same module (or imported from
    another file linted in the same run) and joins on every path that returns, a method of another
    object too where CSL101 says. `self` attributes a
    method leaves written on a side stream (and attributes of an object kept on `self` whose
    method it called, `self.loader.batch`) are followed into the public methods of the same class
    (not its subclasses). A wait made on only one branch of an `if` does not order the other branch,
    except where a later test of the same name against constants implies it (`if method != 2:`
    before `elif method == 1:`, see CSL101): code that joins under any other condition that always
    holds is reported. Naming a tensor to keep it (`d[k] = (t, t.shape)`) or passing it to a
    function of the module that only asks for its metadata (`t.element_size() * t.nelement()`) or
    sets an attribute on it (`t.state.done = True`), or binding it into `functools.partial`, reads
    no data.
    """

    code = "CSL102"
    name = "missing-join"
    summary = "a tensor produced on a side stream is used on another stream with no ordering"
    message = (
        "'{tensor}' was {produced} on {other} and is {verb} on {stream} with no wait_stream/wait_event between them"
    )
    fix_title = "join before the use: `{stream_code}.wait_stream({other_code})`"
    confirmed_by = (READ_AFTER_WRITE, WRITE_AFTER_WRITE)

    VALID = _VALID
    INVALID = _INVALID

    default_join_message = (
        "the default stream, not the caller's, waits on {other}: where '{function}' is called on another"
        " stream (a stream context, a CUDA-graph capture), the caller's next work is not ordered after it"
    )
    default_join_fix = "wait on the caller's stream instead: `{stream_code}.{method}({other_code})`"

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.hazards:
            if hazard.default_join:
                yield self._default_join(flow, hazard)
            elif hazard.missing is Missing.JOIN and hazard.kind in (
                HazardKind.READ_AFTER_WRITE,
                HazardKind.WRITE_AFTER_WRITE,
            ):
                fields = message_fields(hazard, current_stream_code(flow))
                finding = self.finding(flow.path, **flow.location(hazard), **fields)
                yield finding if hazard.returned else attach(finding, join_before_use(flow, hazard))

    def _default_join(self, flow: ModuleFlow, hazard: Hazard) -> Finding:
        current = current_stream_code(flow)
        fields = {**message_fields(hazard, current), "method": "wait_stream", "function": hazard.function or ""}
        event = event_name(hazard.other)
        if event is not None:
            fields.update(other=f"event '{event}'", method="wait_event", other_code=event)
        finding = self.finding(flow.path, **flow.location(hazard), **fields)
        return replace(
            finding, message=self.default_join_message.format(**fields), fix=self.default_join_fix.format(**fields)
        )
