"""The sanitizer on test suites we did not write (issue 25, "measured on code we did not write").

For each suite of manifest.toml: the tests are cut from the library's repository at the
installed version's tag (or are our driver tests), run on the emulated device unchecked
(`pytest --csan-emulate`) and checked (`pytest --csan --csan-report-only`), and optionally under
`csan-lint --confirm`; then each deliberate bug (one wait / record / sync line removed from a
shadow copy of the installed package put first on PYTHONPATH) is looked for statically
(`csan-lint FILE`, new findings against the intact file) and at run time (race sites the intact
run did not have). PyTorch's TestCuda selection runs through benchmarks/torch_cuda/fidelity.py
when a copy of torch's test/test_cuda.py is given.

    python benchmarks/realsuite/run.py [--suite NAME]... [--out DIR] [--repeat N] [--no-bugs] [--torch-test-cuda PATH]

Prints the figures per suite and writes results.json, the run logs, the sanitizer's JSON Lines
and `csan-lint --confirm`'s JSON to --out. Which failures are emulation gaps and which races are
true is read by a person from those files (RESULTS.md); the harness only sorts them: a test that
fails unchecked on the emulated device is a gap candidate, one that fails only when checked is
the sanitizer breaking a program.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runs import NICE, PytestRun, confirm, race_sites, run_pytest, selection_args, static_findings
from suites import HERE, Bug, Suite, load, materialize, shadow_with_bug, site_packages, version_problems

FIDELITY = HERE.parent / "torch_cuda" / "fidelity.py"


def _failure_groups(run: PytestRun, only: set[str] | None = None) -> dict[str, list[str]]:
    """Failed or errored tests grouped by their error line (addresses masked)."""
    groups: dict[str, list[str]] = {}
    for nodeid, entry in run.outcomes.items():
        if entry["outcome"] in ("failed", "error") and (only is None or nodeid in only):
            message = re.sub(r"0x[0-9a-f]+", "0x…", entry.get("message", ""))
            groups.setdefault(message, []).append(nodeid)
    return groups


def _failed(run: PytestRun) -> set[str]:
    return {n for n, e in run.outcomes.items() if e["outcome"] in ("failed", "error")}


def _median_ratio(checked: list[float], plain: list[float]) -> float | None:
    return statistics.median(checked) / statistics.median(plain) if min(plain) > 0 else None


def measure_suite(suite: Suite, out: Path, bugs: bool, repeat: int) -> dict:
    """The suite unchecked and checked, `repeat` interleaved times (the overhead is the ratio of
    medians; outcomes are the first pair's, race sites and internal errors those of every run)."""
    scratch = out / "scratch"
    folder = materialize(suite, scratch)
    selection = selection_args(suite, folder, out)
    pairs = []
    for i in range(repeat):
        print(
            f"[{suite.name}] run {i + 1}/{repeat}: unchecked (pytest --csan-emulate) ...", file=sys.stderr, flush=True
        )
        plain = run_pytest(suite, folder, selection, "emulate", out, f"{suite.name}-emulate-{i}")
        print(f"[{suite.name}] run {i + 1}/{repeat}: checked (pytest --csan) ...", file=sys.stderr, flush=True)
        pairs.append((plain, run_pytest(suite, folder, selection, "csan", out, f"{suite.name}-csan-{i}")))
    plain, checked = pairs[0]
    sites: dict[str, list[str]] = {}
    for _, run in pairs:
        for site, tests in race_sites(run, [folder]).items():
            known = sites.setdefault(site, [])
            known += [test for test in tests if test not in known]
    result: dict = {
        "subset": suite.subset,
        "runs": {run.mode: _run_summary(run) for run in (plain, checked)},
        "gap_candidates": _failure_groups(plain),
        "fail_only_checked": _failure_groups(checked, _failed(checked) - _failed(plain)),
        "race_sites": sites,
        "race_sites_per_run": [len(race_sites(run, [folder])) for _, run in pairs],
        "internal_errors": [e.get("message", e) for _, run in pairs for e in run.internal_errors],
        "overhead_wall": _median_ratio([c.wall for _, c in pairs], [p.wall for p, _ in pairs]),
        "overhead_tests": _median_ratio([c.tests_seconds for _, c in pairs], [p.tests_seconds for p, _ in pairs]),
        "repeat": repeat,
    }
    if suite.confirm:
        print(f"[{suite.name}] running csan-lint --confirm ...", file=sys.stderr, flush=True)
        result["confirm"] = confirm(suite, folder, out)
    if bugs:
        result["bugs"] = [
            _measure_bug(suite, bug, index, folder, selection, out, sites) for index, bug in enumerate(suite.bugs)
        ]
    return result


def _run_summary(run: PytestRun) -> dict:
    return {
        "run": len(run.outcomes),
        "passed": run.count("passed"),
        "failed": run.count("failed", "error"),
        "skipped": run.count("skipped"),
        "wall": run.wall,
        "tests_seconds": run.tests_seconds,
        "exit_code": run.exit_code,
        "timed_out": run.timed_out,
        "log": run.log,
    }


def _measure_bug(
    suite: Suite, bug: Bug, index: int, folder: Path, selection: list[str], out: Path, intact: dict
) -> dict:
    shadow = out / f"shadow-{suite.name}-{index}"
    broken = shadow_with_bug(bug, shadow)
    before = set(static_findings(site_packages() / bug.file))
    after = static_findings(broken)
    new_static = [finding for finding in after if finding not in before]
    print(f"[{suite.name}] deliberate bug {index}: running checked ...", file=sys.stderr, flush=True)
    run = run_pytest(suite, folder, selection, "csan", out, f"{suite.name}-bug{index}", shadow=shadow)
    sites = race_sites(run, [folder, shadow])
    new_sites = {site: tests for site, tests in sites.items() if site not in intact}
    return {
        "name": bug.name,
        "removed": f"{bug.file}: {bug.remove}",
        "static_new_findings": new_static,
        "runtime_new_sites": new_sites,
        "run": _run_summary(run),
    }


def measure_torch_cuda(test_cuda: Path | None, out: Path) -> dict:
    """benchmarks/torch_cuda/fidelity.py on a given copy of torch's test/test_cuda.py."""
    if test_cuda is None:
        return {"not_run": "no copy of torch's test/test_cuda.py given (--torch-test-cuda PATH, from tag v2.13.0)"}
    done = subprocess.run(
        [*NICE, "timeout", "1800", sys.executable, str(FIDELITY), str(test_cuda)], capture_output=True, text=True
    )
    (out / "torch_cuda-fidelity.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"exit_code": done.returncode, "summary": lines[-1] if lines else done.stderr[-500:], "outcomes": lines[:-1]}


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


HEADER = ("suite", "run", "tests", "passed", "failed", "skipped", "race sites", "wall s", "checked/unchecked")


def _rows(name: str, result: dict) -> list[tuple[str, ...]]:
    """The table's rows for one suite: its unchecked and checked runs, and `--confirm`'s."""
    if "runs" not in result:
        return [(name, "-", "-", "-", "-", "-", "-", "-", result.get("not_run") or result.get("summary", ""))]
    rows = []
    for mode, run in result["runs"].items():
        checked = mode == "csan"
        label = ("--csan" if checked else "--csan-emulate") + (" (time limit)" if run["timed_out"] else "")
        overhead = f"{_ratio(result['overhead_wall'])} wall, {_ratio(result['overhead_tests'])} tests"
        if result["repeat"] > 1:
            per_run = "/".join(str(n) for n in result["race_sites_per_run"])
            overhead += f" (medians of {result['repeat']} runs; race sites per run {per_run})"
        counts = (str(run[key]) for key in ("run", "passed", "failed", "skipped"))
        races = str(len(result["race_sites"])) if checked else ""
        rows.append((name, label, *counts, races, f"{run['wall']:.1f}", overhead if checked else ""))
    if "confirm" in result:
        confirmed = result["confirm"]
        tests = confirmed.get("tests", {})
        broke = sum(count for outcome, count in tests.items() if outcome not in ("passed", "skipped"))
        counts = (str(sum(tests.values())), str(tests.get("passed", 0)), str(broke), str(tests.get("skipped", 0)))
        runtime_only = str(confirmed.get("summary", {}).get("runtime_only", "-"))
        note = " ".join(confirmed.get("error", []))
        label = f"--confirm (exit {confirmed['exit_code']})"
        rows.append((name, label, *counts, runtime_only, f"{confirmed['wall']:.1f}", note))
    return rows


def print_report(results: dict[str, dict]) -> None:
    rows = [row for name, result in results.items() for row in _rows(name, result)]
    header = HEADER
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for name, result in results.items():
        _print_details(name, result)


def _print_details(name: str, result: dict) -> None:
    if "runs" not in result:
        for line in result.get("outcomes", []):
            print(f"  {line}")
        return
    print(f"\n== {name}: {result['subset']}")
    for title, groups in (
        ("fails unchecked on the emulated device (gap candidates)", result["gap_candidates"]),
        ("fails only when checked", result["fail_only_checked"]),
    ):
        for message, tests in groups.items():
            print(f"  {title}: {len(tests)} test(s): {message}\n      e.g. {tests[0]}")
    for site, tests in result["race_sites"].items():
        print(f"  race {site}  [{len(tests)} test(s), e.g. {tests[0]}]")
    for error in result["internal_errors"]:
        print(f"  sanitizer internal error: {error}")
    for bug in result.get("bugs", []):
        static = "caught" if bug["static_new_findings"] else "NOT caught"
        runtime = "caught" if bug["runtime_new_sites"] else "NOT caught"
        if not bug["runtime_new_sites"] and bug["run"]["passed"] == 0:
            runtime += " (no test passed: the run never got far enough to show it)"
        print(f"  deliberate bug ({bug['removed']}): statically {static}, at run time {runtime}")
        for finding in bug["static_new_findings"]:
            print(f"      static: {finding}")
        for site in bug["runtime_new_sites"]:
            print(f"      runtime: {site}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", help="a suite of manifest.toml, or torch_cuda (default: all)")
    parser.add_argument("--out", type=Path, help="folder for results.json and the logs (default: a new temporary one)")
    parser.add_argument("--torch-test-cuda", type=Path, help="a copy of torch's test/test_cuda.py (tag v2.13.0)")
    parser.add_argument("--no-bugs", action="store_true", help="skip the deliberate bugs")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved unchecked/checked runs (medians)")
    args = parser.parse_args(argv)
    versions, suites = load()
    known = [s.name for s in suites] + ["torch_cuda"]
    chosen = args.suite or known
    unknown = [name for name in chosen if name not in known]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; the manifest has {', '.join(known)}")
    problems = version_problems(
        {p: versions[p] for p in versions if p == "torch" or any(s.package == p and s.name in chosen for s in suites)}
    )
    if problems:
        print("installed versions differ from the manifest's pins:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    out = (args.out or Path(tempfile.mkdtemp(prefix="realsuite_"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for suite in suites:
        if suite.name in chosen:
            results[suite.name] = measure_suite(suite, out, bugs=not args.no_bugs, repeat=args.repeat)
            (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    if "torch_cuda" in chosen:
        results["torch_cuda"] = measure_torch_cuda(args.torch_test_cuda, out)
    (out / "results.json").write_text(json.dumps({"versions": versions, "suites": results}, indent=1), encoding="utf-8")
    print_report(results)
    print(f"\nresults, logs and reports: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
