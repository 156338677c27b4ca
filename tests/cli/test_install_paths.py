"""`pip install csan-lint` without torch: the linter works, `--confirm` says what to install.

The installed `csan-lint` script runs in a process whose import system cannot see torch (a
`sitecustomize` on PYTHONPATH hides it from every finder), which is what a machine without
torch looks like to both `import torch` and `importlib.util.find_spec("torch")`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from csan_lint.runtime.confirm import INSTALL_HINT

SCRIPT = shutil.which("csan-lint") or str(Path(sys.executable).parent / "csan-lint")
HIDE_TORCH = '''\
import sys


class _HideTorch:
    """Wraps a finder; answers "not found" for torch and its submodules."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            return None
        find_spec = getattr(self.finder, "find_spec", None)
        return find_spec(name, path, target) if find_spec else None

    def __getattr__(self, attribute):
        return getattr(self.finder, attribute)


sys.meta_path[:] = [_HideTorch(finder) for finder in sys.meta_path]
'''
BUGGY = (
    "import torch\n\n\ndef f(x, s):\n    y = x * 2\n    with torch.cuda.stream(s):\n        z = y + 1\n    return z\n"
)


@pytest.fixture
def no_torch(tmp_path: Path) -> dict[str, str]:
    """An environment for subprocesses in which torch is not installed, as far as they can tell."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_TORCH)
    (tmp_path / "mod.py").write_text(BUGGY)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _run(arguments: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(arguments, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_blocker_hides_torch(tmp_path: Path, no_torch: dict[str, str]) -> None:
    probe = "import importlib.util, sys; assert importlib.util.find_spec('torch') is None; import torch"
    done = _run([sys.executable, "-c", probe], tmp_path, no_torch)
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in done.stderr, done.stderr


def test_lint_works_without_torch(tmp_path: Path, no_torch: dict[str, str]) -> None:
    done = _run([SCRIPT, "mod.py"], tmp_path, no_torch)
    assert done.returncode == 1, done.stderr
    assert "mod.py:7:13: CSL101 " in done.stdout and done.stderr == ""


@pytest.mark.parametrize("output_format", ["text", "json", "junit"])
def test_confirm_without_torch_says_what_to_install(
    tmp_path: Path, no_torch: dict[str, str], output_format: str
) -> None:
    done = _run([SCRIPT, "--confirm", "--format", output_format, "mod.py"], tmp_path, no_torch)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "error: --confirm needs torch, pytest, coverage; missing: torch." in done.stderr
    assert INSTALL_HINT in done.stderr
    assert "Traceback" not in done.stderr


def _checkout_copy(destination: Path) -> Path:
    """The working tree's files (tracked and new, not ignored), symbolic links kept as links."""
    root = Path(__file__).resolve().parents[2]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source, target = root / name, destination / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet in git
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return destination


def _venv_with_dependencies(directory: Path) -> Path:
    """A bare virtual environment that sees this one's packages (libcst, torch, setuptools...)
    through a path line, not its .pth files: this environment's editable csan_lint stays out."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    python = directory / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = next(path for path in sys.path if path.endswith("site-packages") and Path(path, "libcst").is_dir())
    Path(site, "dependencies.pth").write_text(ours + "\n")
    return python


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_an_install_works_from_inside_the_checkout(tmp_path: Path, editable: bool) -> None:
    """The root `csan_lint/` folder links `lint`, `rules` and `runtime` in, so that run from the
    checkout, where it comes first on sys.path, it is the whole package, not a stub that hides
    the installed one; run from elsewhere, the installed copy answers."""
    checkout = _checkout_copy(tmp_path / "checkout")
    python = _venv_with_dependencies(tmp_path / "venv")
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        *(["-e"] if editable else []),
        str(checkout),
    ]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    script = str(python.parent / "csan-lint")
    where = "import csan_lint.lint.shell.cli as m, csan_lint.runtime.pytest_plugin; print(m.__file__)"

    from_checkout = _run([str(python), "-c", where], checkout, env)
    assert from_checkout.returncode == 0, from_checkout.stderr
    assert from_checkout.stdout.strip() == str(checkout / "csan_lint" / "lint" / "shell" / "cli.py")
    elsewhere = _run([str(python), "-c", where], tmp_path, env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    if editable:  # the checkout's files, reached through the link or the mapped folder
        assert Path(elsewhere.stdout.strip()).resolve() == (checkout / "lint" / "shell" / "cli.py").resolve()
    else:
        assert "site-packages" in elsewhere.stdout, elsewhere.stdout

    for command in ([script, "examples/"], [str(python), "-m", "csan_lint", "examples/"]):
        linted = _run(command, checkout, env)
        assert linted.returncode == 1 and "CSL101" in linted.stdout, linted.stderr
    plugin = _run(
        [
            str(python),
            "-m",
            "pytest",
            "--csan",
            "--csan-device",
            "emulated",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "examples/",
        ],
        checkout,
        env,
    )
    assert plugin.returncode == 0, plugin.stdout + plugin.stderr


def test_the_root_package_links_the_top_level_folders() -> None:
    """What type checkers and editors follow from the checkout: `csan_lint/lint` is `lint/`."""
    root = Path(__file__).resolve().parents[2]
    for name in ("lint", "rules", "runtime"):
        link = root / "csan_lint" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}"
        assert (link / "__init__.py").samefile(root / name / "__init__.py")
