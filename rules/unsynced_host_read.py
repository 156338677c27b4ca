"""CSL301: the host reads the destination of a non-blocking device-to-host copy before a sync."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from csan_lint.lint.edits import (
    Fix,
    ancestors,
    attach,
    holds,
    insertion,
    is_name,
    may_switch_stream,
    module_context,
    scope,
    spelled_stream,
    statement_of,
)
from csan_lint.lint.facts import CURRENT, HostHazard, ModuleFlow
from csan_lint.lint.model import Edit, Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import first_copy, host_fields
from csan_lint.runtime.kinds import HOST_READ_PENDING


class UnsyncedHostRead(Rule):
    """
    ## What it does
    Flags a host read — `.numpy()`, `.tolist()`, `.item()`, indexing, printing, an operator or
    a torch op (they run on the CPU), a call into numpy or another imported library, an indexed
    assignment, an in-place operator or `copy_` that stores it into a tensor — of the
    destination of a non-blocking device-to-host copy (`x.to("cpu", non_blocking=True)`, or
    `pinned.copy_(x, non_blocking=True)` into a buffer this module pins) before the host has
    synchronized with the copy's stream: `torch.cuda.synchronize()`, `s.synchronize()`, an event
    recorded after the copy and synchronized, or a blocking `.item()`/`.cpu()` on that stream.

    ## Why is this bad?
    A non-blocking copy returns as soon as it is queued. Until the stream reaches it, the host
    buffer holds whatever was there before: the program reads zeros, stale values or half a
    batch, with no error. `.cpu()` and `.to("cpu")` without `non_blocking` wait and are safe.

    ## Assumptions
    A pinned destination of a non-blocking copy is read on the host by any host use (printing,
    indexing, `.numpy()`'s later read, control flow) until a sync that covers the copy's stream:
    `synchronize()` of the stream or device, an event recorded after the copy and synchronized,
    `.item()`/`.cpu()` on the copy's stream. With copies pending on several paths, the message
    names the first in the source. As for every rule, `default_stream()` inside a function is a
    stream of its own (a caller may have made a side stream current): synchronizing it does not
    cover a copy on the current stream; in a module body it is the current stream.

    A buffer given to a function of the module is read where that function reads the parameter
    on the host (before any sync in it); given to code the analysis cannot see (a method of an
    object of unknown class, a callable passed in), it is read there: assumption
    `unseen-callees-read-downloads` (docs/analysis.md). A function of the module that returns
    such a buffer hands it to its callers in the module: the result is read where they read it;
    one the module never calls hands it to callers the analysis cannot see, which read it:
    assumption `unseen-callers-read-returned-downloads`.
    What a call of a function of the module gives its parameters holds inside it, for that call:
    the host as a device (`move(x, "cpu")` makes `x.to(device, non_blocking=True)` a download),
    `True` (`non_blocking=flag`), or a `True` default.

    ## Known problems
    A same-module function that synchronizes anywhere in its body is taken to order the host
    after every copy, even on a path where it does not. A copy into a buffer
    pinned in another module is not seen. `.item()`, `.cpu()` and `.tolist()` on any other
    tensor are taken as syncs with the current stream, even when that tensor is on the host.
    `e.query()` orders the host only where it is seen returning True (the branch it guards,
    the end of `while not e.query()`); `y = host.numpy()` is an alias whose later read is the
    host read.
    """

    code = "CSL301"
    name = "unsynced-host-read"
    summary = "the host reads the destination of a non-blocking device-to-host copy before a sync"
    message = (
        "'{buffer}' is read on the host while the non-blocking copy into it (line {copy_line}) "
        "may still be running on {stream}"
    )
    returned_message = (
        "'{buffer}' is returned to callers that read it on the host while the non-blocking copy into"
        " it (line {copy_line}) may still be running on {stream}, with nothing to wait on"
    )
    fix_title = (
        "synchronize with the copy first: `{stream_code}.synchronize()` "
        "(or record an event after the copy and `synchronize()` it)"
    )
    confirmed_by = (HOST_READ_PENDING,)

    VALID = [
        Valid(
            """
            import torch

            def loss_value(loss):
                host = loss.to("cpu", non_blocking=True)
                torch.cuda.synchronize()
                return host.item()
            """
        ),
        Valid(
            """
            import torch

            def fetch(x, s):
                done = torch.cuda.Event()
                with torch.cuda.stream(s):
                    host = x.to("cpu", non_blocking=True)
                    done.record()
                done.synchronize()
                return host.numpy()
            """
        ),
        Valid(
            """
            import torch

            def fetch(x):
                host = x.cpu()
                blocking = x.to("cpu")
                return host.tolist(), blocking[0]
            """
        ),
        Valid(
            """
            import torch

            def fetch(x, s):
                with torch.cuda.stream(s):
                    host = x.to("cpu", non_blocking=True)
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.current_stream().synchronize()
                print(host)
            """
        ),
        Valid(
            """
            import torch

            def fetch(x, results):
                host = x.to("cpu", non_blocking=True)
                results.append(host)
                return host.shape, host.dtype
            """
        ),
        Valid(
            """
            import torch

            def fetch(x):
                host = x.to("cpu", non_blocking=True)
                host = torch.zeros(3)
                return host.tolist()
            """
        ),
        Valid(
            """
            import torch

            def fetch(x, flag):
                host = x.to("cpu", non_blocking=True)
                if flag:
                    torch.cuda.synchronize()
                else:
                    torch.cuda.current_stream().synchronize()
                return host.tolist()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            x = torch.arange(4.0, device="cuda")
            host = x.to("cpu", non_blocking=True)
            print(host.tolist())
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import numpy as np
            import torch

            def fetch(x, flag):
                host = x.to("cpu", non_blocking=True)
                if flag:
                    torch.cuda.synchronize()
                return np.asarray(host)
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch

            class Offload:
                def __init__(self, n):
                    self.buffer = torch.empty(n, pin_memory=True)

                def fetch(self, x, s):
                    with torch.cuda.stream(s):
                        self.buffer.copy_(x, non_blocking=True)
                    torch.cuda.current_stream().synchronize()
                    return self.buffer[0]
            """,
            lines=(11,),
        ),
        Invalid(
            """
            import torch

            def losses(batches, model):
                values = []
                for batch in batches:
                    loss = model(batch)
                    host = loss.to("cpu", non_blocking=True)
                    values.append(float(host))
                return values
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch

            def fetch(x, verbose):
                if x.is_cuda: host = x.to("cpu", non_blocking=True)
                else: host = x
                if verbose: print(host.tolist())
                return host
            """,
            lines=(6,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.host_hazards:
            if hazard.kind == HOST_READ_PENDING:
                fields = host_fields(flow, hazard)
                finding = self.finding(flow.path, **flow.location(hazard), **fields)
                if dict(hazard.fields).get("returned"):
                    finding = replace(finding, message=self.returned_message.format(**fields))
                yield attach(finding, sync_before_read(flow, hazard))


def sync_before_read(flow: ModuleFlow, hazard: HostHazard) -> Fix | None:
    """`s.synchronize()` just before the statement whose host read would see the copy
    unfinished. A copy made on the current stream is synced as `torch.cuda.current_stream()`
    only where that is still the stream current (no stream block around the read)."""
    copy = first_copy(flow, hazard)
    stream = copy.stream if copy is not None else dict(hazard.fields).get("stream", "")
    if not (stream == CURRENT or is_name(stream)) or len({other.stream for other in hazard.copies}) > 1:
        return None
    context = module_context(flow.module)
    statement = statement_of(flow, hazard.node)
    if statement is None or copy is not None and holds(flow.range(statement), flow.range(copy.node)):
        return None  # a copy read in the statement that makes it (`.to(..., non_blocking=True).tolist()`)
    outer = ancestors(flow, hazard.node)
    if outer is None or stream == CURRENT and any(may_switch_stream(context, node) for node in outer):
        return None
    spelled = spelled_stream(context, stream)
    if spelled is None:
        return None
    start = flow.line(statement)
    return insertion(
        flow, context, Edit(start, start, f"{spelled.code}.synchronize()", scope(flow, statement)), spelled
    )
