"""One pytest run of a real suite (checked or unchecked, on the emulated device), `csan-lint
--confirm` over it, the static check of a module, and the race sites a run reported."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from suites import HERE, Suite, site_packages

NICE = ["nice", "-n", "10"]


@dataclass
class PytestRun:
    """What one pytest run left: per-test outcomes, race reports, the sanitizer's own errors."""

    mode: str
    wall: float
    exit_code: int
    timed_out: bool
    outcomes: dict[str, dict] = field(default_factory=dict)
    races: list[dict] = field(default_factory=list)
    internal_errors: list[dict] = field(default_factory=list)
    log: str = ""

    def count(self, *outcomes: str) -> int:
        return sum(1 for entry in self.outcomes.values() if entry["outcome"] in outcomes)

    @property
    def tests_seconds(self) -> float:
        return sum(entry["seconds"] for entry in self.outcomes.values())


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _run_bounded(command: list[str], cwd: Path, env: dict[str, str], timeout: int, log: Path) -> tuple[int, bool]:
    """Run in its own process group, killed as a group past `timeout` seconds."""
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return process.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return -9, True


def _env(extra_path: Iterable[Path] = ()) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(p) for p in extra_path] + [str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")
    return env


def selection_args(suite: Suite, folder: Path, out: Path) -> list[str]:
    """The pytest arguments that select the suite's subset: its test paths with `-k`, or (with
    `names`) the collected node ids whose test function's name matches, through an @-file."""
    if not suite.names:
        return [*suite.tests, *(["-k", suite.k] if suite.k else [])]
    collected = subprocess.run(
        # on the emulated device, as the runs: tests parametrized by the devices present collect the same ids
        [*NICE, sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--csan-emulate",
         "--csan-device=emulated", *suite.tests],
        cwd=folder, env=_env(), capture_output=True, text=True, timeout=suite.timeout,
    )  # fmt: skip
    pattern = re.compile(suite.names)
    ids = [
        line.strip()
        for line in collected.stdout.splitlines()
        if "::" in line and pattern.search(line.strip().split("::")[-1].split("[")[0])
    ]
    if not ids:
        raise SystemExit(
            f"[suite.{suite.name}]: no collected test's name matches {suite.names!r}:\n{collected.stdout[-2000:]}"
        )
    id_file = out / f"{suite.name}-selected.txt"
    id_file.write_text("\n".join(ids) + "\n", encoding="utf-8")
    return [f"@{id_file}"]


def run_pytest(
    suite: Suite, folder: Path, selection: list[str], mode: str, out: Path, label: str, shadow: Path | None = None
) -> PytestRun:
    """`pytest --csan-emulate` (mode "emulate") or `pytest --csan --csan-report-only` ("csan"),
    on the emulated device, with the outcomes plugin; a shadow folder goes first on PYTHONPATH."""
    outcomes = out / f"{label}-outcomes.jsonl"
    report = out / f"{label}-csan.jsonl"
    for stale in (outcomes, report):
        stale.unlink(missing_ok=True)
    flags = ["--csan-emulate"] if mode == "emulate" else ["--csan", "--csan-report-only", f"--csan-report={report}"]
    command = [
        *NICE, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "realsuite_outcomes",
        "--csan-device=emulated", *flags, *selection,
    ]  # fmt: skip
    env = _env([shadow] if shadow else [])
    env["REALSUITE_OUTCOMES"] = str(outcomes)
    start = time.perf_counter()
    code, timed_out = _run_bounded(command, folder, env, suite.timeout, out / f"{label}.log")
    run = PytestRun(mode, time.perf_counter() - start, code, timed_out, log=str(out / f"{label}.log"))
    run.outcomes = {entry["nodeid"]: entry for entry in _read_jsonl(outcomes)}
    for record in _read_jsonl(report):
        if record.get("type") == "race":
            run.races.append(record)
        elif record.get("type") == "internal-error":
            run.internal_errors.append(record)
    return run


def _relative(path: str, roots: Iterable[Path]) -> str:
    for root in roots:
        prefix = str(root).rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _frame(access: dict | None, roots: list[Path]) -> str:
    if not access or not access.get("stack"):
        return "?"
    innermost = access["stack"][-1]
    return f"{_relative(innermost['file'], roots)}:{innermost['line']} ({access.get('operator')})"


def race_sites(run: PytestRun, roots: list[Path]) -> dict[str, list[str]]:
    """Race sites (kind, the racing access's innermost frame, the earlier one's) with the tests
    that hit each; paths relative to the folder the file came from, so runs compare."""
    roots = [*roots, site_packages()]
    sites: dict[str, list[str]] = {}
    for record in run.races:
        report = record["report"]
        key = f"{report['kind']}: {_frame(report['current'], roots)} <- {_frame(report.get('previous'), roots)}"
        sites.setdefault(key, [])
        if record.get("nodeid") not in sites[key]:
            sites[key].append(record.get("nodeid"))
    return sites


def _each(flag: str, values: list[str]) -> list[str]:
    return [part for value in values for part in (flag, value)]


def confirm(suite: Suite, folder: Path, out: Path) -> dict:
    """`csan-lint --confirm <installed module> --tests <the suite's files> [-k]`: exit code,
    the counts line and the wall time."""
    module = site_packages() / suite.lint
    command = [
        *NICE, sys.executable, "-m", "csan_lint", "--confirm", str(module), *_each("--tests", suite.tests),
        *(["-k", suite.k] if suite.k else []), "--device", "emulated", "--format", "json",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=_env(), capture_output=True, text=True, timeout=suite.timeout * 2)
    wall = time.perf_counter() - start
    (out / f"{suite.name}-confirm.json").write_text(done.stdout, encoding="utf-8")
    (out / f"{suite.name}-confirm.stderr").write_text(done.stderr, encoding="utf-8")
    result: dict = {"exit_code": done.returncode, "wall": wall}
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        result["error"] = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return result
    # `<outside any test>` (the stream code run while pytest imported the tests) is not a test
    tests = [test for test in document.get("tests", []) if not test["nodeid"].startswith("<")]
    result["tests"] = {o: sum(1 for t in tests if t["outcome"] == o) for o in {t["outcome"] for t in tests}}
    result["summary"] = document.get("summary", {})
    return result


def static_findings(path: Path) -> list[str]:
    """`csan-lint PATH --format json`'s findings as `line: CODE message`."""
    done = subprocess.run(
        [*NICE, sys.executable, "-m", "csan_lint", str(path), "--format", "json", "--exit-zero"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:
        findings = json.loads(done.stdout)["findings"]
    except (json.JSONDecodeError, KeyError) as error:
        raise SystemExit(f"csan-lint {path} gave no JSON ({error}): {done.stderr[-2000:]}") from error
    return [f"{f['line']}: {f['code']} {f['message']}" for f in findings]
