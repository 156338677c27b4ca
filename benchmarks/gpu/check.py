"""The GPU check's driver (check.sh installs csan-lint, then runs this): on the device asked for,
runs the `requires_cuda` tests, `csan-lint --confirm` on examples/ against examples/EXPECTED.md,
the CSAN-derived scenarios through the live path, PyTorch's TestCuda selection under
`pytest --csan` (given a copy of torch's test/test_cuda.py: the GPU machine has no network),
and the overhead of `pytest --csan` against the same tests unchecked and under CSAN
(`TORCH_CUDA_SANITIZER=1`), all in this run on this machine. Prints one summary screen and
writes a JSON report; exit status 1 when a step failed.

    python benchmarks/gpu/check.py [--device cuda|emulated] [--torch-tests test_cuda.py] [--json PATH]

On the emulated device (`--device emulated`, a machine with no GPU) the `requires_cuda` tests
skip, so their emulated counterparts run instead, and the CSAN overhead column is absent (CSAN
needs a CUDA build)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FINDING_ROW = re.compile(
    r"^\|\s*`(?P<file>[\w.]+):(?P<line>\d+)`\s*\|\s*(?P<code>\w+)\s*\|\s*(?P<verdict>[a-z-]+)\s*\|"
)
GPU_TEST_FILES = ("tests/sanitizer/test_gpu_path.py", "tests/sanitizer/test_cuda_semantics.py")
"""The files whose tests run on both devices (`requires_cuda` halves and emulated halves)."""


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """(exit status, stdout and stderr, seconds); a run past `timeout` is status 124."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
        return done.returncode, done.stdout + done.stderr, time.perf_counter() - start
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return 124, out + f"\n(timed out after {timeout:.0f} s)", time.perf_counter() - start


def _junit(path: Path) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if not path.exists():
        return counts
    for case in ElementTree.parse(path).iter("testcase"):
        children = {child.tag for child in case}
        outcome = "failed" if children & {"failure", "error"} else "skipped" if "skipped" in children else "passed"
        counts[outcome] += 1
    return counts


def environment(device: str) -> dict[str, Any]:
    code = (
        "import json, sys, torch; from csan_lint.runtime import torch_internals as t; "
        "real = torch.cuda.is_available(); "
        "print(json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__, "
        "'cuda': torch.version.cuda, 'gpus': torch.cuda.device_count() if real else 0, "
        "'gpu': torch.cuda.get_device_name(0) if real else None, 'missing_internals': t.missing(real)}))"
    )
    status, out, _ = _run([sys.executable, "-c", code], 120)
    if status:
        return {"ok": False, "error": out[-2000:]}
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    found["ok"] = not found["missing_internals"] and (device == "emulated" or found["gpus"] > 0)
    return found


def gpu_tests(device: str, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        if device == "cuda":  # every requires_cuda test of the suite
            selection = ["-m", "requires_cuda", "tests/sanitizer", "tests/runtime", "tests/emulation"]
        else:  # their emulated counterparts
            selection = list(GPU_TEST_FILES)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *selection]
        status, out, seconds = _run(command, timeout)
        counts = _junit(report)
    ran_on_gpu = counts["passed"] + counts["failed"] if device == "cuda" else None
    ok = status in (0, 5) and counts["failed"] == 0 and (device == "emulated" or bool(ran_on_gpu))
    return {"ok": ok, **counts, "seconds": round(seconds, 1), "tail": out[-1500:] if not ok else ""}


def examples(device: str, timeout: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "csan_lint", "examples/", "--confirm", "--device", device, "--format", "json"]
    status, out, seconds = _run(command, timeout)
    lines = (REPO / "examples" / "EXPECTED.md").read_text(encoding="utf-8").splitlines()
    intended = {
        (f"examples/{m['file']}", int(m["line"]), m["code"]): m["verdict"]
        for line in lines
        if (m := FINDING_ROW.match(line))
    }
    try:
        # The JSON document, then what csan-lint says on stderr.
        findings = json.JSONDecoder().raw_decode(out, out.index("{"))[0]["findings"] if status == 1 else []
    except (ValueError, KeyError):
        findings = []
    got = {(f["path"], f["line"], f["code"]): f["verdict"] for f in findings}
    differing = sorted(
        f"{path}:{line} {code}: expected {intended.get((path, line, code))}, got {got.get((path, line, code))}"
        for path, line, code in set(intended) | set(got)
        if intended.get((path, line, code)) != got.get((path, line, code))
    )
    ok = status == 1 and not differing
    return {
        "ok": ok,
        "findings": len(got),
        "as_expected": len(intended) - len(differing),
        "expected": len(intended),
        "differing": differing,
        "seconds": round(seconds, 1),
        "tail": "" if ok or findings else out[-1500:],
    }


def scenarios(device: str, timeout: float) -> dict[str, Any]:
    status, out, seconds = _run([sys.executable, str(HERE / "scenarios.py"), "--device", device, "--json"], timeout)
    try:
        results = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "seconds": round(seconds, 1), "tail": out[-1500:]}
    differing = [r for r in results if not r["ok"]]
    return {
        "ok": status == 0 and not differing,
        "passed": len(results) - len(differing),
        "total": len(results),
        "differing": differing,
        "seconds": round(seconds, 1),
    }


def fidelity(device: str, torch_tests: Path | None, timeout: float) -> dict[str, Any]:
    if torch_tests is None:
        return {"ok": None, "skipped": "no copy of torch's test/test_cuda.py given (--torch-tests)"}
    runner = REPO / "benchmarks" / "torch_cuda" / "fidelity.py"
    status, out, seconds = _run([sys.executable, str(runner), str(torch_tests), "--device", device], timeout)
    summary = next((line for line in reversed(out.splitlines()) if " selected, " in line), out[-300:])
    return {"ok": status == 0, "summary": summary.strip(), "seconds": round(seconds, 1)}


def overhead(device: str, timeout: float) -> dict[str, Any]:
    tests = str(HERE / "overhead_tests.py")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests]
    if device == "cuda":
        ways = {"unchecked": (base, {}), "csan-lint": ([*base, "--csan", "--csan-device", "cuda"], {})}
        ways["TORCH_CUDA_SANITIZER=1"] = (base, {"TORCH_CUDA_SANITIZER": "1"})
    else:
        ways = {
            "unchecked": ([*base, "--csan-emulate"], {}),
            "csan-lint": ([*base, "--csan", "--csan-device", "emulated"], {}),
        }
    seconds: dict[str, float | None] = {}
    failures = []
    for name, (command, env) in ways.items():
        status, out, took = _run(command, timeout / len(ways), env)
        seconds[name] = round(took, 2)
        if status != 0:
            failures.append(f"{name}: exit {status}: {out[-600:]}")
    unchecked = seconds["unchecked"] or 0.0
    ratios = {
        name: round(took / unchecked, 2) for name, took in seconds.items() if took and unchecked and name != "unchecked"
    }
    return {"ok": not failures, "seconds": seconds, "ratio_to_unchecked": ratios, "failures": failures}


def summary(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"csan-lint GPU check on {report['device']}: python {env.get('python')}, torch {env.get('torch')}, "
        f"CUDA {env.get('cuda')}, {env.get('gpus', 0)} GPU(s) {env.get('gpu') or ''}".rstrip(),
        f"  torch internals missing: {', '.join(env.get('missing_internals', [])) or 'none'}",
    ]
    mark = {True: "ok  ", False: "FAIL", None: "skip"}
    tests = report["gpu_tests"]
    lines.append(
        f"{mark[tests['ok']]} GPU-path tests: {tests['passed']} passed, {tests['failed']} failed, "
        f"{tests['skipped']} skipped ({tests['seconds']} s)"
    )
    ex = report["examples"]
    lines.append(
        f"{mark[ex['ok']]} examples --confirm: {ex['as_expected']}/{ex['expected']} verdicts as "
        f"EXPECTED.md ({ex['seconds']} s)"
    )
    lines += [f"       {line}" for line in ex["differing"][:10]]
    sc = report["scenarios"]
    lines.append(
        f"{mark[sc['ok']]} CSAN scenarios, live: {sc.get('passed', 0)}/{sc.get('total', '?')} as expected "
        f"({sc['seconds']} s)"
    )
    lines += [f"       {r['name']}: expected {r['expected']}, got {r['got']}" for r in sc.get("differing", [])]
    fi = report["fidelity"]
    lines.append(f"{mark[fi['ok']]} TestCuda selection under pytest --csan: {fi.get('summary') or fi.get('skipped')}")
    ov = report["overhead"]
    shown = ", ".join(f"{name} {took} s" for name, took in ov["seconds"].items())
    ratios = ", ".join(f"{name} {ratio}x" for name, ratio in ov["ratio_to_unchecked"].items())
    lines.append(f"{mark[ov['ok']]} overhead (same tests, this run): {shown}; against unchecked: {ratios}")
    lines.append(f"{'PASSED' if report['ok'] else 'FAILED'} in {report['seconds']} s (limit {report['budget_s']} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "emulated"), default="cuda")
    parser.add_argument(
        "--torch-tests", type=Path, help="a copy of torch's test/test_cuda.py (its tag: the installed torch's)"
    )
    parser.add_argument("--json", type=Path, default=Path("gpu-check-report.json"), help="where the JSON report goes")
    parser.add_argument(
        "--budget", type=float, default=450.0, help="seconds for all steps (the check must end within 8 minutes)"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()

    def left(share: float) -> float:
        return max(30.0, (args.budget - (time.perf_counter() - start)) * share)

    report: dict[str, Any] = {"device": args.device, "budget_s": args.budget}
    report["environment"] = environment(args.device)
    report["gpu_tests"] = gpu_tests(args.device, left(0.3))
    report["examples"] = examples(args.device, left(0.35))
    report["scenarios"] = scenarios(args.device, left(0.2))
    report["fidelity"] = fidelity(args.device, args.torch_tests, left(0.5))
    report["overhead"] = overhead(args.device, left(0.9))
    report["seconds"] = round(time.perf_counter() - start, 1)
    steps = ("environment", "gpu_tests", "examples", "scenarios", "fidelity", "overhead")
    report["ok"] = all(report[step]["ok"] is not False for step in steps)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(summary(report))
    print(f"JSON report: {args.json}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
