"""Entry points and lifecycle: `python -m csan_lint.runtime`, `enable()`, `sanitize()` leaving
torch as it found it, and shadow state that does not grow with freed memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.cuda._gpu_trace as gpu_trace

from csan_lint.runtime import emulation, kinds, sanitize

RACY = """\
import torch
a = torch.rand(4, 2, device="cuda")
with torch.cuda.stream(torch.cuda.Stream()):
    torch.mul(a, 5, out=a)
"""

CLEAN = """\
import sys
import torch
a = torch.rand(4, 2, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    torch.mul(a, 5, out=a)
print("args", sys.argv[1:])
"""


def run_python(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "ignore", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_module_runner_reports_races_and_exits_1(tmp_path):
    (tmp_path / "racy.py").write_text(RACY)
    result = run_python("-m", "csan_lint.runtime", "--device", "emulated", "racy.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "write-after-write" in result.stderr
    assert 'racy.py", line 4' in result.stderr and 'racy.py", line 2' in result.stderr
    assert "csan: 1 race(s) found" in result.stderr


@pytest.mark.slow
def test_module_runner_passes_arguments_and_exits_0_when_clean(tmp_path):
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run_python("-m", "csan_lint.runtime", "clean.py", "--flag", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "args ['--flag', 'x']" in result.stdout
    assert "csan:" not in result.stderr


@pytest.mark.slow
def test_module_runner_json_and_trace_out(tmp_path):
    (tmp_path / "racy.py").write_text(RACY)
    result = run_python(
        "-m", "csan_lint.runtime", "--format", "json", "--trace-out", "trace.jsonl", "racy.py", cwd=tmp_path
    )
    assert result.returncode == 1
    assert '"kind": "write-after-write"' in result.stderr
    trace = (tmp_path / "trace.jsonl").read_text().splitlines()
    assert '"csan-trace"' in trace[0]
    assert any('"kernel_launched"' in line and "aten::mul.out" in line for line in trace)


@pytest.mark.slow
def test_enable_checks_the_rest_of_the_program_and_reports_at_exit(tmp_path):
    script = "import csan_lint.runtime\ncsan_lint.runtime.enable(device='emulated')\n" + RACY
    (tmp_path / "prog.py").write_text(script)
    result = run_python("prog.py", cwd=tmp_path)
    assert "write-after-write" in result.stderr
    assert 'prog.py", line 6' in result.stderr


def test_sanitize_leaves_torch_as_it_found_it():
    registries = [v for v in vars(gpu_trace).values() if hasattr(v, "callback_list")]
    callbacks = {id(r): list(r.callback_list) for r in registries}
    record_stream, tolist = torch.Tensor.record_stream, torch.Tensor.tolist
    modes_before = torch._C._len_torch_dispatch_stack()
    with sanitize(device="emulated"):
        assert torch.cuda.is_available()
        assert torch.Tensor.record_stream is not record_stream
    assert not emulation.is_active()
    assert {id(r): list(r.callback_list) for r in registries} == callbacks
    assert torch.Tensor.record_stream is record_stream and torch.Tensor.tolist is tolist
    assert "record_stream" not in torch.Tensor.__dict__
    assert torch._C._len_torch_dispatch_stack() == modes_before


def test_freed_memory_releases_its_shadow_state():
    with sanitize(device="emulated") as sanitizer:
        side = torch.cuda.Stream()
        for _ in range(2000):
            x = torch.ones(32, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
            torch.cuda.current_stream().wait_stream(side)
            del x, y
        stats = sanitizer.tracker.stats()
        assert sanitizer.errors == []
        assert stats["allocations"] < 10
        assert len(sanitizer.mode.pending) < 10


def test_dead_pinned_buffers_are_forgotten():
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(16, device="cuda")
        for _ in range(500):
            host = x.to("cpu", non_blocking=True)
            torch.cuda.synchronize()
            host.add_(1)  # a host write, after the sync: fine
            del host
        assert sanitizer.errors == []
        assert len(sanitizer.mode.host_blocks) <= 64
        assert sanitizer.tracker.stats()["allocations"] <= 70


def test_a_racing_loop_reports_once():
    with sanitize(device="emulated") as sanitizer:
        side = torch.cuda.Stream()
        keep = []
        for _ in range(50):
            x = torch.ones(8, device="cuda")
            with torch.cuda.stream(side):
                x.add_(1)
            keep.append(x)
        torch.cuda.synchronize()
    assert [e.kind for e in sanitizer.errors] == [kinds.WRITE_AFTER_WRITE]


def test_nested_module_stacks_point_at_the_user_line(tmp_path):
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn

        def run():
            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).cuda()
            x = torch.ones(2, 4, device="cuda")
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                return model(x)
        """
    )
    (tmp_path / "model_code.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        import model_code

        with sanitize(device="emulated") as sanitizer:
            model_code.run()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("model_code", None)
    from csan_lint.runtime.stacks import innermost_user_frame

    assert sanitizer.errors, "reading weights written on the default stream from a side stream races"
    frame = innermost_user_frame(sanitizer.errors[0].current.stack)
    assert frame is not None and frame.filename.endswith("model_code.py") and frame.lineno == 9


def test_written_trace_replays_to_the_same_reports(tmp_path):
    from csan_lint.runtime.report import to_json
    from csan_lint.runtime.trace import replay
    from csan_lint.runtime.tracker import Tracker

    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as out, sanitize(device="emulated", trace_out=out) as sanitizer:
        x = torch.ones(8, device="cuda")
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x.mul_(2)
        host = x.to("cpu", non_blocking=True)
        host.tolist()
        del x
        torch.empty(8, device="cuda")  # the default stream's pool may hand out x's block
    replayed = Tracker()
    replay(path, replayed)
    live = [to_json(e) for e in sanitizer.errors]
    assert sorted(e["kind"] for e in live) == sorted(
        [kinds.WRITE_AFTER_WRITE, kinds.READ_AFTER_WRITE, kinds.HOST_READ_PENDING, kinds.FREE_IN_USE]
    )
    assert [to_json(e) for e in replayed.errors] == live


@pytest.mark.slow
def test_module_runner_reports_races_before_a_crash(tmp_path):
    (tmp_path / "crash.py").write_text(RACY + "raise ValueError('user bug')\n")
    result = run_python("-m", "csan_lint.runtime", "crash.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "ValueError: user bug" in result.stderr
    assert "write-after-write" in result.stderr


@pytest.mark.slow
def test_package_and_plugin_import_without_torch(tmp_path):
    probe = (
        "import sys\n"
        "import csan_lint.runtime, csan_lint.runtime.pytest_plugin\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = run_python("-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_real_gpu_current_stream_reads_the_raw_handle_per_device(monkeypatch):
    from csan_lint.runtime import sanitizer as module
    from csan_lint.runtime.devices import DeviceStreams, stream_key

    handles = {3: 1003, 1: 0}  # device 1 is on its default stream
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 3, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", handles.__getitem__, raising=False)
    keys = DeviceStreams(lambda: 3, lambda: 4)
    current, of_tensor = module._cuda_streams(keys)
    assert current() == 1003
    on_device_1 = type("Tensor", (), {"get_device": lambda self: 1})()
    assert of_tensor(on_device_1) == stream_key(0, 1) != 0
    # Without the raw call, the public API gives the same answers.
    monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: type("S", (), {"cuda_stream": handles[device]})())
    current, of_tensor = module._cuda_streams(keys)
    assert current() == 1003 and of_tensor(on_device_1) == stream_key(0, 1)


def test_restart_keeps_one_trace_going(tmp_path):
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as out, sanitize(device="emulated", trace_out=out) as sanitizer:
        torch.ones(2, device="cuda").add_(1)
        sanitizer.restart()
        torch.ones(2, device="cuda").add_(2)
    lines = path.read_text().splitlines()
    assert sum('"csan-trace"' in line for line in lines) == 1
    assert sum('"kernel_launched"' in line for line in lines) == 4
