"""Lint fetched public repositories whole with an installed csan-lint; print findings per repo per rule.

Each snapshot's newest commit is extracted (its .py files only) into
benchmarks/realworld/.cache/repos/<owner>+<name>@<commit>/ once, then linted in one
`csan-lint --format json` run per repository. Runs offline: snapshots that are not fetched are
listed as missing. The repositories are those of issue #15 unless --repo names others.

    python benchmarks/realworld/lint_repos.py [--csan-lint PATH] [--mirrors DIR] [--repo OWNER/NAME ...]
                                              [--tree LABEL=DIR ...] [--json OUT]

Columns: files the linter read, files that call a stream API in any spelling (a broad text
match, `stream`), files its prefilter passed to the parser (`parsed`), then findings per rule.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from corpus import DEFAULT_MIRRORS, REPOS_CACHE, extract, mirror_git_dir, run_csan_lint

REPOS = (
    "facebookresearch/fairscale",
    "NVIDIA/apex",
    "huggingface/accelerate",
    "huggingface/trl",
    "pytorch/torchtune",
    "huggingface/pytorch-image-models",
    "pytorch/pytorch",
    "pytorch/torchrec",
    "NVIDIA/TransformerEngine",
    "deepspeedai/DeepSpeed",
    "NVIDIA/Megatron-LM",
    "huggingface/diffusers",
    "vllm-project/vllm",
)
LINT_CONFIG = "respect-gitignore = false\n"
"""The extracted trees live in this repository's ignored cache: its .gitignore must not hide them.
Written at each tree's root (`CONTEXT_CONFIG`) and given as the run's config, it makes the tree
the project whose modules the calls are resolved in: with one config above all the trees, every
snapshot in the cache would be one project, each module name ambiguous among the checkouts."""
CONTEXT_CONFIG = "csan-lint-context.toml"
DIAGNOSTICS = ("CSL001", "CSL002", "CSL003")
STREAM_API = re.compile(
    rb"wait_stream|record_stream|wait_event|record_event|Stream\(|\.stream\(|use_stream|StreamContext"
    rb"|torch\.accelerator|get_accelerator\(\)\.(?:current_stream|default_stream|Event)"
)
"""A broad text match for stream, event and device-generic stream calls, in any spelling: files the
linter's prefilter skips but that match it are stream code the linter does not see."""


def count_stream_files(tree: Path) -> int:
    return sum(1 for path in tree.rglob("*.py") if STREAM_API.search(path.read_bytes()))


def collect_targets(repos: list[str], trees: list[str], mirrors: Path) -> tuple[list[tuple[str, str, Path]], list[str]]:
    """(label, commit, directory) per tree to lint, and the repositories with no snapshot."""
    targets, missing = [], []
    for repo in repos:
        git_dir = mirror_git_dir(mirrors, repo)
        if git_dir is None:
            missing.append(repo)
            continue
        commit = subprocess.run(
            ["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        tree, lacking = extract(git_dir, commit, REPOS_CACHE / f"{repo.replace('/', '+')}@{commit[:12]}")
        if lacking:
            print(f"{repo}: the snapshot lacks {lacking} .py file(s) (4 MiB and more): not linted", file=sys.stderr)
        targets.append((repo, commit, tree))
    for label_and_dir in trees:
        label, _, directory = label_and_dir.partition("=")
        if not Path(directory).is_dir():
            raise SystemExit(f"--tree {label_and_dir}: {directory!r} is not a directory")
        targets.append((label, "local", Path(directory)))
    return targets, missing


def print_table(rows: list[tuple[str, str, dict, int, Counter]]) -> None:
    codes = sorted({code for *_, per_rule in rows for code in per_rule if code not in DIAGNOSTICS})
    print(
        f"{'repository':34} {'commit':12} {'files':>6} {'stream':>6} {'parsed':>6} {'findings':>8} "
        + " ".join(f"{code:>6}" for code in codes)
        + f" {'errors':>6}"
    )
    for repo, commit, summary, stream_files, per_rule in rows:
        errors = sum(per_rule[code] for code in DIAGNOSTICS)
        counts = " ".join(f"{per_rule[code]:6}" for code in codes)
        found = summary["findings"] - errors
        files = f"{summary['files_checked']:6} {stream_files:6} {summary['files_parsed']:6}"
        print(f"{repo:34} {commit:12} {files} {found:8} {counts} {errors:6}")
    zero = [
        f"{repo} ({stream_files} stream-api files, {summary['files_parsed']} parsed)"
        for repo, _, summary, stream_files, per_rule in rows
        if summary["findings"] == sum(per_rule[c] for c in DIAGNOSTICS)
    ]
    if zero:
        print(f"\nno findings: {'; '.join(zero)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csan-lint", dest="linter", default="csan-lint", help="the csan-lint executable to measure")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    parser.add_argument(
        "--repo", action="append", dest="repos", help="owner/name (repeatable); default: issue #15's list"
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also lint a local tree, e.g. torch/distributed=.venv/lib/python3.11/site-packages/torch/distributed",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every finding, with its repository, here")
    args = parser.parse_args()
    REPOS_CACHE.mkdir(parents=True, exist_ok=True)
    targets, missing = collect_targets(args.repos or list(REPOS), args.tree, args.mirrors)
    rows, all_findings = [], []
    for repo, commit, tree in targets:
        extracted = REPOS_CACHE.resolve() in tree.resolve().parents  # a --tree is the user's: nothing written in it
        config = tree / CONTEXT_CONFIG if extracted else REPOS_CACHE / CONTEXT_CONFIG
        config.write_text(LINT_CONFIG, encoding="utf-8")
        report = run_csan_lint(args.linter, ["--config", str(config), str(tree)])
        per_rule = Counter(f["code"] for f in report["findings"])
        rows.append((repo, commit[:12], report["summary"], count_stream_files(tree), per_rule))
        for finding in report["findings"]:
            relative = Path(finding["path"]).resolve().relative_to(tree.resolve())
            all_findings.append({"repo": repo, "commit": commit, **finding, "path": str(relative)})
    print_table(rows)
    if missing:
        print(f"\nmissing snapshots (fetch them into {args.mirrors}): {', '.join(missing)}")
    if args.json:
        args.json.write_text(json.dumps(all_findings, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
