"""The vector clocks (lazy host joins, event snapshots, syncs) must order exactly what an
explicit happens-before graph orders: random programs run against the Tracker and against a
graph-reachability oracle with the same policy: the last read per stream, and the writes and
reads a later write was not ordered after."""

from __future__ import annotations

import random

import pytest

from csan_lint.runtime import kinds
from csan_lint.runtime.events import HOST, Access
from csan_lint.runtime.tracker import Tracker

STREAMS = (0, 1001, 1002, 1003)
EVENTS = (1, 2, 3)
TENSORS = (0x1000, 0x2000)


class Oracle:
    """Happens-before as a graph: nodes are launches and host steps; an access conflicts with the
    last write / last reads when no path leads from them to it."""

    def __init__(self) -> None:
        self.preds: dict[int, set[int]] = {}
        self.last: dict[int, int] = {}
        self.pending: dict[int, set[int]] = {}
        self.host_last: int | None = None
        self.snapshots: dict[int, set[int] | None] = {}
        self.writes: dict[int, list[tuple[int, str]]] = {}
        self.reads: dict[int, dict[int, tuple[int, str]]] = {}
        self.found: set[tuple[str, str, str]] = set()

    def _node(self, preds: set[int]) -> int:
        node = len(self.preds)
        self.preds[node] = preds
        return node

    def _frontier(self, stream: int) -> set[int]:
        known = set(self.pending.get(stream, ()))
        if stream in self.last:
            known.add(self.last[stream])
        if self.host_last is not None:
            known.add(self.host_last)
        return known

    def _before(self, a: int, b: int) -> bool:
        seen, todo = set(), [b]
        while todo:
            node = todo.pop()
            if node == a:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(self.preds[node])
        return False

    def _host_step(self, sources: set[int]) -> int:
        preds = set(sources)
        if self.host_last is not None:
            preds.add(self.host_last)
        self.host_last = self._node(preds)
        return self.host_last

    def _access(self, node: int, stream: int, operator: str, tensor: int, is_write: bool, race_kinds) -> None:
        writes = self.writes.setdefault(tensor, [])
        reads = self.reads.setdefault(tensor, {})
        for write_node, write_op in writes:
            if not self._before(write_node, node):
                self.found.add((race_kinds[2] if is_write else race_kinds[0], operator, write_op))
        if is_write:
            for read_node, read_op in reads.values():
                if not self._before(read_node, node):
                    self.found.add((race_kinds[1], operator, read_op))
            # A write hides only what it is ordered after: the rest may race later accesses.
            writes[:] = [w for w in writes if not self._before(w[0], node)] + [(node, operator)]
            for key, (read_node, _) in list(reads.items()):
                if self._before(read_node, node):
                    del reads[key]
        else:
            reads[stream] = (node, operator)

    def launch(self, stream, operator, tensor, is_write):
        node = self._node(self._frontier(stream))
        self.last[stream] = node
        self.pending[stream] = set()
        self._access(
            node,
            stream,
            operator,
            tensor,
            is_write,
            (kinds.READ_AFTER_WRITE, kinds.WRITE_AFTER_READ, kinds.WRITE_AFTER_WRITE),
        )

    def host(self, operator, tensor, is_write):
        node = self._host_step(set())
        self._access(
            node,
            HOST,
            operator,
            tensor,
            is_write,
            (kinds.HOST_READ_PENDING, kinds.HOST_WRITE_PENDING, kinds.HOST_WRITE_PENDING),
        )

    def record(self, event, stream):
        self.snapshots[event] = self._frontier(stream)

    def wait(self, event, stream):
        snapshot = self.snapshots.get(event)
        if snapshot:
            self.pending.setdefault(stream, set()).update(snapshot)

    def create(self, event):
        self.snapshots[event] = None

    def stream_sync(self, stream):
        self._host_step(self._frontier(stream))

    def event_sync(self, event):
        if self.snapshots.get(event):
            self._host_step(self.snapshots[event])

    def device_sync(self):
        self._host_step(set().union(*(self._frontier(s) for s in STREAMS)))


def _program(rng: random.Random, steps: int) -> list[tuple]:
    program = []
    for i in range(steps):
        roll = rng.random()
        if roll < 0.5:
            program.append(("launch", rng.choice(STREAMS), f"op{i}", rng.choice(TENSORS), rng.random() < 0.5))
        elif roll < 0.65:
            program.append(("record", rng.choice(EVENTS), rng.choice(STREAMS)))
        elif roll < 0.8:
            program.append(("wait", rng.choice(EVENTS), rng.choice(STREAMS)))
        elif roll < 0.85:
            program.append(("create", rng.choice(EVENTS)))
        elif roll < 0.9:
            program.append(("host", f"host{i}", rng.choice(TENSORS), rng.random() < 0.5))
        elif roll < 0.95:
            program.append(("stream_sync", rng.choice(STREAMS)))
        elif roll < 0.98:
            program.append(("event_sync", rng.choice(EVENTS)))
        else:
            program.append(("device_sync",))
    return program


def _tracker_run(program: list[tuple]) -> set[tuple[str, str, str]]:
    t = Tracker()
    for step in program:
        name, *args = step
        if name == "launch":
            stream, operator, tensor, is_write = args
            t.kernel_launched(stream, operator, [Access(tensor, 64, is_write, "self")])
        elif name == "host":
            operator, tensor, is_write = args
            t.host_accessed(tensor, 64, is_write, operator)
        elif name == "record":
            t.event_recorded(*args)
        elif name == "wait":
            t.event_waited(*args)
        elif name == "create":
            t.event_created(*args)
        elif name == "stream_sync":
            t.stream_synchronized(*args)
        elif name == "event_sync":
            t.event_synchronized(*args)
        else:
            t.device_synchronized()
    return {(e.kind, e.current.operator, e.previous.operator) for e in t.errors if e.previous is not None}


def _oracle_run(program: list[tuple]) -> set[tuple[str, str, str]]:
    oracle = Oracle()
    for name, *args in program:
        getattr(oracle, name)(*args)
    return oracle.found


@pytest.mark.parametrize("seed", range(300))
def test_clocks_match_a_happens_before_graph(seed):
    program = _program(random.Random(seed), 50)
    assert _tracker_run(program) == _oracle_run(program)


def test_random_programs_mix_races_and_orderings():
    results = [_tracker_run(_program(random.Random(seed), 50)) for seed in range(60)]
    assert sum(bool(r) for r in results) > 20
    found_kinds = {kind for r in results for kind, _, _ in r}
    assert {
        kinds.READ_AFTER_WRITE,
        kinds.WRITE_AFTER_READ,
        kinds.WRITE_AFTER_WRITE,
        kinds.HOST_READ_PENDING,
    } <= found_kinds
