"""What one function does on any of its paths: the stream-flow analysis's path-insensitive record.

The flow state (`ordering.FlowState`) is what holds at a program point and joins at branches;
these facts are collected on purpose across all paths and passes, because the questions they
answer are about the function as a whole (is this name ever rebound? did some path record it?),
asked at its returns and by its summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from csan_lint.lint.ordering import Access, Mark


@dataclass
class AnyPath:
    """The facts `FunctionAnalysis` gathers on any path (and on every loop pass)."""

    bound: set[str] = field(default_factory=set)
    """Names (re)bound here: a parameter rebound no longer denotes the caller's argument."""
    tested: set[str] = field(default_factory=set)
    """Names the path facts have tested: rebinding one of them drops what was known of it."""
    stream_tests: dict[str, tuple[str, str, bool]] = field(default_factory=dict)
    """Names bound to a comparison of two streams (`on_side = current_stream() != s`)."""
    indexed_by: set[str] = field(default_factory=set)
    """Names some access's region depends on (`i` of `buf[i]`): rebinding one unplaces it."""
    maybe_none: set[str] = field(default_factory=set)
    """Names bound to `None` somewhere in the function: an argument that may be `None`."""
    loop_items: set[str] = field(default_factory=set)
    """Names bound by a `for` loop: a different object on each pass."""
    borrowed: set[str] = field(default_factory=set)
    """Names bound to an item of the caller's data (`buf = self.buffers[k]`): what is
    written there outlives the call, like a parameter (`_return`)."""
    held_by: dict[str, str] = field(default_factory=dict)
    """Names bound to a getter's result (`p = self.store.get(k)`) -> the object holding it
    (`self.store[]`: any item it hands out): a write through the name is one there too."""
    callers_items: set[str] = field(default_factory=set)
    """Loop names bound to the items of a list the caller passed in (a bucket): the caller
    may drop them with the list as soon as the function returns (`_return`)."""
    callers_objects: set[str] = field(default_factory=set)
    """Names of the caller's objects: its arguments (not `self`), and the items iterating or
    filtering them gives (`for it in items`, `[it for it in items if c]`). A tensor stored in
    an attribute of one (`it.feature = t`) is handed to the caller (`_handed_back_through`)."""
    lists: set[str] = field(default_factory=set)
    """Names bound to a list of tensors a comprehension made (`Value.listed`): `xs[i] = t`
    replaces an item, no tensor is written."""
    fresh_streams: set[str] = field(default_factory=set)
    """Names bound to a stream created here (`side = torch.cuda.Stream()`)."""
    read_on_fresh: dict[str, str] = field(default_factory=dict)
    """Values taken as the caller's data on a stream ordered after nothing -> the assumption
    that took them (FRESH_STREAMS_READ_CALLERS_DATA, NEVER_WAITING_STREAMS_READ_CALLERS_DATA)."""
    addressed: set[str] = field(default_factory=set)
    """Tensors whose address was handed out (`x.data_ptr()`): work launched later on a stream
    given by its handle (`s.cuda_stream`) may read and write them there."""
    uploaded: set[int] = field(default_factory=set)
    """Expressions copied to the device (`x` of `x.cuda()`): host memory, which no stream of the
    caller's is writing."""
    made_on: dict[str, str] = field(default_factory=dict)
    """Name -> the stream current where a fresh allocation was last bound to it."""
    made_by_moves: set[str] = field(default_factory=set)
    """Those of `made_on` a move of a tensor of unknown place made (`x.to(device)`): new memory
    only under `moves-of-unplaced-tensors-allocate`."""
    callers_blocks: dict[cst.CSTNode, bool] = field(default_factory=dict)
    """Allocations on the caller's stream before any launch on it here, on every pass: the
    block may still be in use by the caller's work only, which every caller's wait of the
    using stream before the call orders (`Caller.ordered`)."""
    swapped_in: set[str] = field(default_factory=set)
    """Side streams on which the module's tensors got memory made there (`p.data = v`), for
    a method that swaps it out (lint/dataswap.py)."""
    recorded_somewhere: set[str] = field(default_factory=set)
    """Names `record_stream`ed on some path: their lifetime is handed to the allocator."""
    recorded_on_pool: dict[cst.Call, tuple[str, str, Access]] = field(default_factory=dict)
    """`t.record_stream(s)` of a local allocation on `s`, the stream it came from -> (name,
    `s`, the call): it protects nothing, which matters where `t` is used on another stream."""
    used_off_pool: dict[str, set[str]] = field(default_factory=dict)
    """Name -> the streams other than its allocating one it was used on, on some path."""
    waits_callers_event: set[str] = field(default_factory=set)
    """Streams that waited on an event of `self` or a parameter recorded nowhere here: recorded
    by the caller, or the method that produced its tensors, after its writes."""
    joined_at_entry: set[str] = field(default_factory=set)
    """Side streams the caller's stream waits for here before any work of this call on
    them: the previous call's pending work there is joined by the next call (`_return`)."""
    touched_after_work: set[str] = field(default_factory=set)
    """Local names used while work launched here on another stream was pending: only they
    may hold a way to join it when returned (`_return`)."""
    returned: set[tuple[int | None, Mark]] = field(default_factory=set)
    """The last writes of what the `return`s hand back, by position in a returned tuple
    (None: the whole value), for the function's summary (`returned_key`)."""
    returned_by: dict[int, dict[int | None, Mark]] = field(default_factory=dict)
    """Calls, by id, whose callee returns values written on another stream: their writes there."""
    allocated_returns: set[frozenset[str]] = field(default_factory=set)
    """Per `return` of memory allocated here on the entry stream, the names its path found
    `None`, for the function's summary (`Summary.allocates`)."""
    rebound_by_calls: set[str] = field(default_factory=set)
    """Attributes a called function bound to new tensors (`self.x = ...` in the callee):
    this function's summary passes that on, a new value, not a write of the old one."""
