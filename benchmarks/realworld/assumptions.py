"""What each of the analysis' assumptions finds and costs, on code we did not write.

For each assumption (lint/analysis/assumptions.py) the build is run with it flipped from its
default, and compared with the build as it ships:
- the development corpus, whole files (`precision_recall.py --whole-files`): bugs found, false
  positives, known bugs found with their fix clean;
- whole repositories (`lint_repos.py`): findings gone and new, the gone ones with the labels
  TRIAGE.md gave them (true / plausible / false), the new ones to be read.

    python benchmarks/realworld/assumptions.py --csan-lint .venv/bin/csan-lint [--only NAME ...]
        [--tree LABEL=DIR ...] [--manifest TOML ...] [--no-repos] [--json OUT]

`--manifest` scores more manifests the same way (whole files): held-out sets whose first-sight
figure was already reported are development data like the corpus. Never pass a set not yet
measured: a default chosen on it would be fitted to it. `--no-repos` skips the repositories.

Run it with the Python that has csan-lint installed (the table is read from the package).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import lint_repos

from csan_lint.lint.analysis.assumptions import ASSUMPTIONS

HERE = Path(__file__).resolve().parent

NOT_TRIAGED = ("pytorch/pytorch", "vllm-project/vllm")
REPOS = tuple(repo for repo in lint_repos.REPOS if repo not in NOT_TRIAGED)
"""The repositories TRIAGE.md labels the findings of (lint_repos.py's list, less the two it never triaged)."""
_ROW = re.compile(
    r"^\| (?P<repo>[^|]+?) \| (?P<path>[^|:]+):(?P<lines>[^|]+?) \| (?P<rules>CSL[^|]+?) \| "
    r"(?P<label>true|plausible|false) \|"
)


def triage_labels() -> dict[tuple[str, str, str], str]:
    """(repo's short name, path:line, rule) -> the last label TRIAGE.md gave it; a row of several
    lines (`45, 55 (×2)`) or rules (`CSL201, CSL102`) labels each."""
    labels = {}
    for line in (HERE / "TRIAGE.md").read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        numbers = re.findall(r"(?<![×\d])\d+", match["lines"])
        for number in numbers:
            for rule in re.findall(r"CSL\d+", match["rules"]):
                labels[(match["repo"].strip(), f"{match['path'].strip()}:{number}", rule)] = match["label"]
    return labels


def _short(repo: str) -> str:
    """TRIAGE.md's name of a repository: `apex`, `timm`, `Megatron`, a tree's label as given."""
    name = repo.rpartition("/")[2]
    return {"pytorch-image-models": "timm", "Megatron-LM": "Megatron", "TransformerEngine": "TE"}.get(name, name)


def wrapper(linter: str, switch: str | None, directory: Path) -> str:
    """An executable that runs `linter` with one `--assume` switch (the scripts take an executable)."""
    path = directory / f"csan-lint-{switch or 'default'}"
    extra = f" --assume {switch}" if switch else ""
    path.write_text(f'#!/bin/sh\nexec {linter} "$@"{extra}\n', encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def corpus(linter: str, out: Path, manifest: Path | None = None) -> dict[str, int]:
    """The totals of one manifest (the corpus by default), whole files."""
    command = [sys.executable, str(HERE / "precision_recall.py"), "--csan-lint", linter, "--whole-files"]
    command += ["--json", str(out)] + (["--manifest", str(manifest)] if manifest is not None else [])
    subprocess.run(command, check=True, capture_output=True)
    totals = json.loads(out.read_text())["totals"]
    keys = ("tp", "fp", "fn", "known_bugs_both", "findings_on_fixed")
    return {key: totals[key] for key in keys if key in totals}


def scores(linter: str, manifests: list[Path], directory: Path, tag: str) -> dict[str, dict[str, int]]:
    """The corpus's totals and each further manifest's, by name."""
    found = {"corpus": corpus(linter, directory / f"{tag}-corpus.json")}
    for manifest in manifests:
        found[manifest.stem] = corpus(linter, directory / f"{tag}-{manifest.stem}.json", manifest)
    return found


def repositories(linter: str, trees: list[str], out: Path) -> set[tuple[str, str, str]]:
    command = [sys.executable, str(HERE / "lint_repos.py"), "--csan-lint", linter, "--json", str(out)]
    for repo in REPOS:
        command += ["--repo", repo]
    for tree in trees:
        command += ["--tree", tree]
    subprocess.run(command, check=True, capture_output=True)
    return {(_short(f["repo"]), f"{f['path']}:{f['line']}", f["code"]) for f in json.loads(out.read_text())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csan-lint", dest="linter", default="csan-lint")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="measure only these (repeatable)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR", help="as lint_repos.py's")
    parser.add_argument("--manifest", action="append", default=[], type=Path, help="also score (repeatable)")
    parser.add_argument("--no-repos", action="store_true", help="skip the whole repositories")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    labels = triage_labels()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        base_linter = wrapper(args.linter, None, directory)
        base = scores(base_linter, args.manifest, directory, "base")
        base_repos = set() if args.no_repos else repositories(base_linter, args.tree, directory / "base-repos.json")
        print(f"default build: {base}; repositories {len(base_repos)} findings")
        for entry in ASSUMPTIONS:
            if args.only and entry.name not in args.only:
                continue
            switch = f"{entry.name}={'off' if entry.default else 'on'}"
            linter = wrapper(args.linter, switch, directory)
            flipped_scores = scores(linter, args.manifest, directory, entry.name)
            out = directory / f"{entry.name}-repos.json"
            flipped = set() if args.no_repos else repositories(linter, args.tree, out)
            gone = Counter(labels.get(key, "unlabelled") for key in base_repos - flipped)
            new = sorted(flipped - base_repos)
            results.append(
                {
                    "switch": switch,
                    "scores": flipped_scores,
                    "repositories_gone": dict(gone),
                    "repositories_new": [list(key) for key in new],
                }
            )
            print(f"{switch}: repositories gone {dict(gone)}, new {len(new)}")
            for name, totals in flipped_scores.items():
                delta = {key: totals[key] - base[name][key] for key in totals}
                print(f"    {name}: {totals} (delta {delta})")
            for key in new:
                print(f"    new: {' '.join(key)}")
    if args.json:
        args.json.write_text(json.dumps({"default": base, "flips": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
