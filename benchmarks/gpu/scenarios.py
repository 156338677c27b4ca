"""CSAN's TestEventHandler scenarios (the engine's tests/runtime/test_tracker_csan.py) as torch
programs run through the live path (the dispatch mode and the trace callbacks of the device in
use), each with the report kinds it must give: `python scenarios.py --device cuda|emulated`
prints one line per scenario and exits 1 when one disagrees."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch

from csan_lint.runtime import kinds
from csan_lint.runtime.sanitizer import Sanitizer

N = 1 << 16


def _side() -> torch.cuda.Stream:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # after the tensors' creation
    return side


def simple_error() -> object:
    t = torch.ones(N, device="cuda")
    s1, s2 = _side(), _side()
    with torch.cuda.stream(s1):
        t.sum()
    with torch.cuda.stream(s2):
        t.mul_(2)
    return t


def simple_sync() -> object:
    t = torch.ones(N, device="cuda")
    s1, s2 = _side(), _side()
    with torch.cuda.stream(s1):
        t.sum()
    event = torch.cuda.Event()
    event.record(s1)
    s2.wait_event(event)
    with torch.cuda.stream(s2):
        t.mul_(2)
    return t


def reads_check_last_write() -> object:
    t = torch.ones(N, device="cuda")
    s1, s2 = _side(), _side()
    with torch.cuda.stream(s1):
        t.mul_(2)
    with torch.cuda.stream(s2):
        t.sum()
    return t


def stream_synchronize() -> object:
    t = torch.ones(N, device="cuda")
    s1 = _side()
    with torch.cuda.stream(s1):
        t.mul_(2)
    s1.synchronize()
    t.add_(1)
    return t


def device_synchronize() -> object:
    t = torch.ones(N, device="cuda")
    s1 = _side()
    with torch.cuda.stream(s1):
        t.mul_(2)
    torch.cuda.synchronize()
    t.add_(1)
    return t


def event_synchronize() -> object:
    t = torch.ones(N, device="cuda")
    s1 = _side()
    with torch.cuda.stream(s1):
        t.mul_(2)
    event = s1.record_event()
    event.synchronize()
    t.add_(1)
    return t


def free_while_in_use() -> None:
    t = torch.ones(N, device="cuda")
    s1 = _side()
    with torch.cuda.stream(s1):
        t.sum()
    del t
    torch.ones(N, device="cuda").mul_(3)  # the block handed out again on the default stream


def record_stream_keeps_the_block() -> None:
    t = torch.ones(N, device="cuda")
    s1 = _side()
    with torch.cuda.stream(s1):
        t.sum()
    t.record_stream(s1)
    del t
    torch.ones(N, device="cuda").mul_(3)


def pinned_download_read_early() -> object:
    t = torch.ones(N, device="cuda")
    host = torch.empty(N, pin_memory=True)
    host.copy_(t, non_blocking=True)
    host.sum()
    return t


def pageable_download_is_synchronous() -> object:
    t = torch.ones(N, device="cuda")
    host = torch.empty(N)
    host.copy_(t, non_blocking=True)
    host.sum()
    return t


SCENARIOS: dict[str, tuple[Callable[[], object], list[str]]] = {
    "simple_error": (simple_error, [kinds.WRITE_AFTER_READ]),
    "simple_sync": (simple_sync, []),
    "reads_check_last_write": (reads_check_last_write, [kinds.READ_AFTER_WRITE]),
    "stream_synchronize": (stream_synchronize, []),
    "device_synchronize": (device_synchronize, []),
    "event_synchronize": (event_synchronize, []),
    "free_while_in_use": (free_while_in_use, [kinds.FREE_IN_USE]),
    "record_stream_keeps_the_block": (record_stream_keeps_the_block, []),
    "pinned_download_read_early": (pinned_download_read_early, [kinds.HOST_READ_PENDING]),
    "pageable_download_is_synchronous": (pageable_download_is_synchronous, []),
}


def run(device: str) -> list[dict[str, object]]:
    results = []
    for name, (program, expected) in SCENARIOS.items():
        sanitizer = Sanitizer(device=device)
        with sanitizer:
            kept = program()  # alive until the device is done with it
            torch.cuda.synchronize()
            del kept
        got = sorted({error.kind for error in sanitizer.errors})
        results.append({"name": name, "expected": sorted(expected), "got": got, "ok": got == sorted(expected)})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "emulated"), default="cuda")
    parser.add_argument("--json", action="store_true", help="one JSON list on stdout")
    args = parser.parse_args(argv)
    results = run(args.device)
    if args.json:
        print(json.dumps(results))
    else:
        for result in results:
            print(
                f"{'ok' if result['ok'] else 'DIFFERS':8} {result['name']}: "
                f"expected {result['expected']}, got {result['got']}"
            )
    return 0 if all(result["ok"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
