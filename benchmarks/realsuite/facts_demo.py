"""Facts from runs on the real suites (issue 24, "Facts from runs"): for each case below, a
`csan-lint --confirm --save-facts` run of the library's tests on the emulated device, then the
static pass on the same code without and with `--facts`, and the findings that differ.

    python benchmarks/realsuite/facts_demo.py [--case NAME] [--scratch DIR]

Needs the manifest's pinned packages (manifest.toml). A case with a deliberate bug runs and lints
a shadow of the installed package with that one line removed (suites.shadow_with_bug); the tests
are cut from the library's repository or are our drivers, as `run.py` does. Prints, per case,
the facts file's size and the findings (code, file, line, message) without and with the facts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suites import Suite, load, materialize, shadow_with_bug, site_packages, version_problems


@dataclass(frozen=True)
class Case:
    name: str
    suite: str
    bug: str | None
    """A manifest bug's name, planted before the run; None: the code as released."""
    lint: str
    """Linted, relative to site-packages (or to the shadow holding the bug)."""
    k: str = ""
    tests: tuple[str, ...] = ()
    """Instead of the suite's tests (a smaller subset: say why in `why`)."""
    why: str = ""


CASES = (
    Case(
        "torchao-bug",
        "torchao",
        "the offload stream no longer waits for the backward before copying the gradient",
        "torchao/optim",
        k="cpu_offload",
        why="torchao's own CPUOffloadOptimizer tests, the offload stream's wait for the backward removed",
    ),
    Case("torchao-fixed", "torchao", None, "torchao/optim", k="cpu_offload", why="the same tests, torchao as released"),
    Case(
        "transformers",
        "transformers",
        None,
        "transformers/cache_utils.py",
        why="our driver (generate() with offloaded caches), transformers as released",
    ),
    Case(
        "tensordict-bug",
        "tensordict",
        "a non-blocking device-to-host transfer is no longer waited for before its result is used",
        "tensordict",
        k="non_blocking",
        tests=("test/tensordict/test_generic.py",),
        why="test_generic.py's tests named non_blocking (3 of the suite's 909; they catch the bug at run time)",
    ),
)


def findings(path: Path, facts: Path | None, cwd: Path) -> list[dict]:
    command = [sys.executable, "-m", "csan_lint", str(path), "--no-cache", "--format", "json"]
    command += ["--facts", str(facts)] if facts is not None else []
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):
        raise SystemExit(f"csan-lint failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)["findings"]


def shown(finding: dict) -> str:
    path = finding["path"].split("site-packages/")[-1].split("shadow/")[-1]
    return f"{finding['code']} {path}:{finding['line']} {finding['message']}"


def run_case(case: Case, suite: Suite, scratch: Path) -> dict:
    folder = materialize(suite, scratch / case.name)
    env = dict(os.environ)
    root = site_packages()
    if case.bug is not None:
        (bug,) = [bug for bug in suite.bugs if bug.name == case.bug]
        shadow = scratch / case.name / "shadow"
        shadow_with_bug(bug, shadow)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow), env.get("PYTHONPATH", "")]))
        root = shadow
    facts = folder / "facts.json"
    confirm = [sys.executable, "-m", "csan_lint", str(root / case.lint), "--confirm", "--no-cache", "--all-tests"]
    confirm += ["--tests", *(case.tests or suite.tests), "--device", "emulated", "--timeout", str(suite.timeout)]
    confirm += ["-k", case.k] if case.k else []
    done = subprocess.run(
        [*confirm, "--save-facts", str(facts)], cwd=folder, env=env, capture_output=True, text=True, timeout=3600
    )
    tests = next((line for line in done.stdout.splitlines() if line.startswith("tests ")), "tests ?")
    if not facts.exists():
        raise SystemExit(f"{case.name}: no facts saved ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    document = json.loads(facts.read_text())
    without = [shown(f) for f in findings(root / case.lint, None, folder)]
    with_facts = [shown(f) for f in findings(root / case.lint, facts, folder)]
    return {
        "case": case.name,
        "why": case.why,
        "tests": " ".join(tests.split()),
        "facts_bytes": facts.stat().st_size,
        "facts_functions": len(document["functions"]),
        "facts_contexts": sum(len(entry["contexts"]) for entry in document["functions"]),
        "without": without,
        "with": with_facts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=[case.name for case in CASES])
    parser.add_argument("--scratch", type=Path, help="where tests, shadows and facts go (default: a temporary folder)")
    options = parser.parse_args()
    versions, suites = load()
    problems = version_problems({name: versions[name] for name in ("torch", "transformers", "torchao", "tensordict")})
    if problems:
        raise SystemExit("; ".join(problems))
    by_name = {suite.name: suite for suite in suites}
    scratch = options.scratch or Path(tempfile.mkdtemp(prefix="facts_demo_"))
    for case in CASES:
        if options.case and case.name not in options.case:
            continue
        result = run_case(case, by_name[case.suite], scratch)
        print(f"## {result['case']}: {result['why']}")
        size = f"{result['facts_bytes']} bytes, {result['facts_functions']} functions"
        facts = f"{size}, {result['facts_contexts']} contexts"
        print(f"{result['tests']}; facts: {facts}")
        for label in ("without", "with"):
            print(f"{label} --facts: {len(result[label])} finding(s)")
            for line in result[label]:
                print(f"  {line}")
        print(flush=True)


if __name__ == "__main__":
    main()
