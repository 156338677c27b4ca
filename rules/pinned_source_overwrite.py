"""CSL302: the host overwrites the pinned source of a pending non-blocking host-to-device copy."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import host_fields
from csan_lint.runtime.kinds import HOST_WRITE_PENDING

_RESTAGED = """
import torch

class Staging:
    def __init__(self, n):
        self.host = torch.empty(2 * n, dtype=torch.int32, pin_memory=True)
        self.lengths = self.host[:n]
        self.device = torch.empty(2 * n, dtype=torch.int32, device="cuda")

    def send(self, lengths):
        self.lengths[: len(lengths)] = lengths
        self.device.copy_(self.host, non_blocking={non_blocking})
"""
"""A view of a pinned buffer kept on `self`, re-staged on every call before the copy out of it."""


class PinnedSourceOverwrite(Rule):
    """
    ## What it does
    Flags a host write — `buf.copy_(batch)`, `buf.fill_(...)`, `buf[i] = ...`, `out=buf` — to a
    pinned buffer (pinned in this module: `.pin_memory()`, `pin_memory=True`) while a
    non-blocking copy out of it to the device (`buf.to("cuda", non_blocking=True)`,
    `buf.cuda(non_blocking=True)`, `dev.copy_(buf, non_blocking=True)`) may still be running,
    that is before the host synchronized with the copy's stream. Loops are followed around: the
    copy at the end of one iteration meets the refill at the start of the next. So are methods: a
    copy out of a buffer kept on `self` still running when the method returns meets the refill at
    the start of its next call, also when the refill writes a view of the buffer kept on `self`
    (`self.part = self.buf[a:b].view(dtype)`, bound in any method).

    ## Why is this bad?
    A non-blocking copy from pinned memory is a DMA transfer the GPU performs later. Refilling
    the buffer before it is done makes the device receive part of the next batch (the reused
    staging buffer of hand-written data loaders): training silently sees mixed data.

    ## Assumptions
    A non-blocking host-to-device copy from pinned memory reads its source when the stream
    reaches it, so any host write to the source before a sync that covers that stream races
    with it; `buf.copy_(src)` without `non_blocking` is a host write of a pinned `buf`. A method is
    taken to be called again with no host sync in between, and a view of an attribute (slices,
    integer indices, `.view`, `.narrow`, `.T`, a ctypes pointer to its `data_ptr()`...) to share
    its storage, as a local name bound to it does; a view of a pinned buffer is pinned.

    ## Known problems
    Only buffers pinned in the same module are known to be pinned (a copy from pageable memory
    waits for the host and is safe). A blocking `buf.copy_(src)` is taken as a host write even
    when `src` is on the device. Rebinding the buffer's name (`staging = self.staging[i]`) is
    taken to give a different buffer, so double buffering by index is trusted, not checked; so is
    a buffer kept on `self` that is bound in more than one other method of its class (it may be
    swapped between calls), and any buffer kept on `self` when another function of the module
    synchronizes the host (it may run between calls). A copy out of one view and a write to
    another view of the same buffer are not known to overlap. Writes by other methods of the
    class between two calls are not followed.
    """

    code = "CSL302"
    name = "pinned-source-overwrite"
    summary = "the host overwrites the pinned source of a pending non-blocking host-to-device copy"
    message = (
        "pinned buffer '{buffer}' is overwritten on the host{through} while {copy} (line {copy_line}) "
        "may still be running on {stream}"
    )
    fix_title = (
        "synchronize with the copy before refilling '{buffer}': `{stream_code}.synchronize()` "
        "(or an event recorded after the copy), or alternate between two buffers"
    )
    confirmed_by = (HOST_WRITE_PENDING,)

    VALID = [
        Valid(
            """
            import torch

            def upload(batches):
                staging = torch.empty(4).pin_memory()
                out = []
                for batch in batches:
                    staging.copy_(batch)
                    out.append(staging.to("cuda", non_blocking=True))
                    torch.cuda.current_stream().synchronize()
                return out
            """
        ),
        Valid(
            """
            import torch

            def upload(batches, s):
                staging = torch.empty(4, pin_memory=True)
                done = torch.cuda.Event()
                out = []
                for batch in batches:
                    done.synchronize()
                    staging.copy_(batch)
                    with torch.cuda.stream(s):
                        out.append(staging.to("cuda", non_blocking=True))
                        done.record()
                return out
            """
        ),
        Valid(
            """
            import torch

            def upload(batches):
                staging = torch.empty(4)
                out = []
                for batch in batches:
                    staging.copy_(batch)
                    out.append(staging.to("cuda", non_blocking=True))
                return out
            """
        ),
        Valid(
            """
            import torch

            def upload(batch):
                staging = torch.empty(4).pin_memory()
                staging.copy_(batch)
                device = staging.to("cuda")
                staging.zero_()
                return device
            """
        ),
        Valid(
            """
            import torch

            def upload(batch):
                staging = batch.pin_memory()
                device = staging.cuda(non_blocking=True)
                total = staging.sum()
                staging = torch.zeros(4)
                staging.fill_(1)
                return device, total
            """
        ),
        Valid(_RESTAGED.format(non_blocking=False)),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def upload(batches):
                staging = torch.empty(4).pin_memory()
                out = []
                for batch in batches:
                    staging.copy_(batch)
                    out.append(staging.to("cuda", non_blocking=True))
                return out
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch

            staging = torch.ones(4).pin_memory()
            device = staging.cuda(non_blocking=True)
            staging.fill_(3)
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch

            class Uploader:
                def __init__(self):
                    self.host = torch.empty(8, pin_memory=True)
                    self.device = torch.empty(8, device="cuda")

                def send(self, values, s):
                    with torch.cuda.stream(s):
                        self.device.copy_(self.host, non_blocking=True)
                    self.host[:] = values
                    return self.device
            """,
            lines=(11,),
        ),
        Invalid(
            """
            import torch

            def upload(batch, flag):
                staging = torch.empty(4, pin_memory=True)
                device = staging.to("cuda", non_blocking=True)
                if flag:
                    torch.cuda.synchronize()
                torch.mul(batch, 2, out=staging)
                return device
            """,
            lines=(8,),
        ),
        Invalid(
            _RESTAGED.format(non_blocking=True),
            lines=(10,),
        ),
        Invalid(
            """
            import torch

            class Coins:
                def __init__(self, n):
                    self.coins = torch.empty(n, device="cuda")
                    self.cpu_coins = torch.empty(n, pin_memory=True)

                def draw(self, bs):
                    cpu = self.cpu_coins[:bs]
                    cpu.uniform_(0.0, 1.0)
                    self.coins[:bs].copy_(cpu, non_blocking=True)
            """,
            lines=(10,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.host_hazards:
            if hazard.kind == HOST_WRITE_PENDING:
                values = host_fields(flow, hazard)
                values["through"] = f" through its view '{values['view']}'" if "view" in values else ""
                whose = "the previous call's" if "previous_call" in values else "the"
                values["copy"] = f"{whose} non-blocking copy out of it"
                yield self.finding(flow.path, **flow.location(hazard), **values)
