"""The stacks backward ops are reported at. On a GPU autograd runs backward ops on device
threads of its own, where no user frame is: such an op is reported at its forward op's line,
remembered under the forward op's autograd node. Apart from the dispatch mode (mode.py), which
asks it once per op, because it is autograd's bookkeeping, not the op's."""

from __future__ import annotations

import threading

import torch

from csan_lint.runtime.stacks import Stack, innermost_user_frame

MAX_FORWARD_STACKS = 1 << 16
# torch internals (checked at enable(), torch_internals.py): absent, the mode still imports.
_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_node = getattr(torch._C, "_current_autograd_node", None)


class ForwardStacks:
    """The stacks of forward ops by their autograd node's sequence number; the oldest half is
    dropped past MAX_FORWARD_STACKS."""

    def __init__(self) -> None:
        self.by_sequence_nr: dict[int, Stack] = {}
        # Per thread: .sequence_nr, autograd's counter at the thread's last op.
        self._local = threading.local()

    def attributed(self, stack: Stack) -> Stack:
        """The stack to report an op at: a forward op's is remembered under its autograd node;
        a backward op with no user frame (on autograd's device threads) gets its forward op's."""
        node = _current_node()  # type: ignore[misc]
        if node is not None:
            if innermost_user_frame(stack) is None:
                return self.by_sequence_nr.get(node._sequence_nr(), stack)
            return stack
        # Autograd made a node for this op (before the op reached the mode) iff its counter moved.
        sequence_nr = _sequence_nr()  # type: ignore[misc]
        local = self._local
        if getattr(local, "sequence_nr", -1) != sequence_nr:
            local.sequence_nr = sequence_nr
            stacks = self.by_sequence_nr
            if len(stacks) >= MAX_FORWARD_STACKS:
                for old in list(stacks)[: MAX_FORWARD_STACKS // 2]:
                    del stacks[old]
            stacks[sequence_nr - 1] = stack
        return stack
