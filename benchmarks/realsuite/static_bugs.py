"""Which of the real suites' deliberate bugs the static pass finds, one file at a time.

For each `[[suite.NAME.bug]]` of manifest.toml (a source line of a library file replaced by
`pass`), the library's wheel is downloaded at its pinned version (`pip download --no-deps`,
never installed), the file is linted intact and broken, each in a folder of its own, and the
findings the broken copy adds are printed: a bug is found statically when there is one. The
run-time half of the same bugs is run.py's. Public code stays in the scratch folder.

    python benchmarks/realsuite/static_bugs.py [--csan-lint PATH] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from suites import load, with_bug


def _wheel(package: str, version: str, scratch: Path) -> Path:
    found = sorted(scratch.glob(f"{package}-{version}-*.whl"))
    if not found:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            f"{package}=={version}",
            "-d",
            str(scratch),
        ]
        subprocess.run(command, check=True)
        found = sorted(scratch.glob(f"{package}-{version}-*.whl"))
    return found[0]


def _findings(linter: str, path: Path) -> set[tuple[str, str]]:
    out = subprocess.run([linter, "--no-cache", "--format", "json", str(path)], capture_output=True, text=True)
    return {(f["code"], f["message"]) for f in json.loads(out.stdout)["findings"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csan-lint", dest="linter", default="csan-lint")
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where wheels are kept (default: a temporary folder)"
    )
    args = parser.parse_args()
    versions, suites = load()
    found = total = 0
    with tempfile.TemporaryDirectory() as temporary:
        scratch = args.scratch or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        seen: set[tuple[str, str]] = set()
        for suite in suites:
            for bug in suite.bugs:
                if (bug.file, bug.remove) in seen:
                    continue  # the same bug under another suite's tests
                seen.add((bug.file, bug.remove))
                with zipfile.ZipFile(_wheel(suite.package, versions[suite.package], scratch)) as wheel:
                    source = wheel.read(bug.file).decode("utf-8")
                runs = []
                for label, text in (("intact", source), ("broken", with_bug(bug, source, bug.file))):
                    path = scratch / label / Path(bug.file).name
                    path.parent.mkdir(exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                    runs.append(_findings(args.linter, path))
                new = sorted(runs[1] - runs[0])
                total += 1
                found += bool(new)
                print(f"{suite.package} {bug.file}: {bug.name}: {'found' if new else 'not found'}")
                for code, message in new:
                    print(f"    {code} {message}")
    print(f"{found} of {total} deliberate bugs found statically")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
