"""The real suites' manifest (manifest.toml): what to install, which tests to cut from which
repository, and the deliberate bugs; and the scratch copies the harness runs them from (the cut
test files, and a shadow of an installed package with one line removed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"
DRIVERS = HERE / "drivers"
MIRRORS = Path(os.environ.get("REALSUITE_MIRRORS", "/work/.mirror"))
"""Local mirrors of GitHub repositories, as `<owner>+<name>/repo` git directories; a repository
with no mirror is cloned from GitHub."""


class ManifestError(SystemExit):
    """A bad manifest entry, named by file, suite and key."""


@dataclass(frozen=True)
class Bug:
    name: str
    file: str
    remove: str


@dataclass(frozen=True)
class Suite:
    name: str
    package: str
    tests: list[str]
    lint: str
    subset: str
    timeout: int
    confirm: bool = False
    drivers: list[str] = field(default_factory=list)
    repo: str = ""
    ref: str = ""
    cut: list[str] = field(default_factory=list)
    k: str = ""
    names: str = ""
    bugs: list[Bug] = field(default_factory=list)


_REQUIRED = {"package": str, "tests": list, "lint": str, "subset": str, "timeout": int}
_OPTIONAL = {
    "confirm": bool, "drivers": list, "repo": str, "ref": str, "cut": list, "k": str, "names": str, "bug": list,
}  # fmt: skip


def _checked(where: str, table: dict, key: str, kind: type) -> object:
    value = table[key]
    if not isinstance(value, kind):
        raise ManifestError(f"{where}: `{key}` must be a {kind.__name__}, got {value!r}")
    return value


def load(path: Path = MANIFEST) -> tuple[dict[str, str], list[Suite]]:
    """The pinned versions and the suites, in the file's order; errors name the file and key."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    versions = data.get("versions", {})
    suites = []
    for name, table in data.get("suite", {}).items():
        where = f"{path}: [suite.{name}]"
        unknown = set(table) - set(_REQUIRED) - set(_OPTIONAL)
        if unknown:
            raise ManifestError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        missing = set(_REQUIRED) - set(table)
        if missing:
            raise ManifestError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
        values = {
            key: _checked(where, table, key, kind) for key, kind in {**_REQUIRED, **_OPTIONAL}.items() if key in table
        }
        bugs = [Bug(**entry) for entry in values.pop("bug", [])]
        if values.get("cut") and not (values.get("repo") and values.get("ref")):
            raise ManifestError(f"{where}: `cut` needs `repo` and `ref`")
        if values["package"] not in versions:
            raise ManifestError(f"{where}: package {values['package']!r} has no pinned version in [versions]")
        suites.append(Suite(name=name, bugs=bugs, **values))  # type: ignore[arg-type]
    return versions, suites


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def version_problems(versions: dict[str, str]) -> list[str]:
    """Installed versions that differ from the pins (a local tag like +cpu is ignored)."""
    problems = []
    for package, pinned in versions.items():
        try:
            installed = metadata.version(package)
        except metadata.PackageNotFoundError:
            problems.append(f"{package} is not installed (pin: {pinned})")
            continue
        if installed.split("+")[0] != pinned:
            problems.append(f"{package} {installed} is installed, the manifest pins {pinned}")
    return problems


def _checkout(repo: str, ref: str, scratch: Path) -> Path:
    """A git directory holding `ref` of `repo`: the local mirror, else a shallow clone."""
    mirror = MIRRORS / repo.replace("/", "+") / "repo"
    if mirror.is_dir():
        return mirror
    clone = scratch / "clones" / repo.replace("/", "+")
    if not clone.exists():
        url = f"https://github.com/{repo}.git"
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", ref, "--bare", url, str(clone)], check=True)
    return clone


def materialize(suite: Suite, scratch: Path) -> Path:
    """The suite's test folder: our drivers and the test files cut from its repository at `ref`."""
    folder = scratch / suite.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for driver in suite.drivers:
        shutil.copy(DRIVERS / driver, folder / driver)
    if suite.cut:
        git_dir = _checkout(suite.repo, suite.ref, scratch)
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", suite.ref, *suite.cut], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    for test in suite.tests:
        if not (folder / test).exists():
            raise ManifestError(f"[suite.{suite.name}]: test path {test!r} is not in the materialized folder")
    return folder


def shadow_with_bug(bug: Bug, root: Path) -> Path:
    """A folder to put first on PYTHONPATH: the bug's top-level package as symbolic links to the
    installed files, except `bug.file`, copied with the line `bug.remove` replaced by `pass`
    (same indentation, same line numbers). Returns the broken copy's path."""
    installed = site_packages()
    relative = Path(bug.file)
    source = installed / relative
    broken_text = with_bug(bug, source.read_text(encoding="utf-8"), str(source))
    # Real folders along the path to the broken file, links for everything beside them.
    parts = relative.parts
    for depth in range(len(parts) - 1):
        here_installed = installed.joinpath(*parts[: depth + 1])
        here_shadow = root.joinpath(*parts[: depth + 1])
        here_shadow.mkdir(parents=True, exist_ok=True)
        for entry in here_installed.iterdir():
            target = here_shadow / entry.name
            if entry.name == parts[depth + 1] or entry.name == "__pycache__" or target.exists():
                continue
            target.symlink_to(entry)
    broken = root / relative
    broken.write_text(broken_text, encoding="utf-8")
    return broken


def with_bug(bug: Bug, source: str, where: str) -> str:
    """`source` with the line `bug.remove` replaced by `pass` (same indentation, same line
    numbers); `where` names the file in the error when the line is not there exactly once."""
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == bug.remove]
    if len(hits) != 1:
        raise ManifestError(f"bug {bug.name!r}: {len(hits)} lines of {where} read {bug.remove!r} (need exactly 1)")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    lines[hits[0]] = f"{indent}pass  # realsuite deliberate bug: removed `{bug.remove}`\n"
    return "".join(lines)
