"""Discovery (.gitignore, exclude, skipped directories, explicit files) and the text prefilter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.files import Excluder, PathError, discover, display_path, might_have_findings


def make_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def found(root: Path, paths: list[str], exclude: tuple[str, ...] = (), gitignore: bool = True) -> list[str]:
    """Discovered files as paths relative to `root` (missing ones as `missing:<name>`)."""
    result = []
    for item in discover([str(root / path) for path in paths], Excluder(root, exclude, gitignore)):
        if isinstance(item, PathError):
            result.append(f"{item.message}:{item.path.name}")
        else:
            result.append(item.relative_to(root).as_posix())
    return result


def test_walks_python_files_recursively_and_skips_tool_directories(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "a.py": "",
            "notes.txt": "",
            "pkg/b.py": "",
            "pkg/sub/c.py": "",
            "pkg/__pycache__/b.py": "",
            ".csan_lint_cache/x.py": "",
            ".git/hooks/h.py": "",
            "env/pyvenv.cfg": "home = /usr",
            "env/lib/site.py": "",
        },
    )
    assert found(tmp_path, ["."]) == ["a.py", "pkg/b.py", "pkg/sub/c.py"]


def test_root_and_nested_gitignore_files_are_honoured(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    make_tree(
        tmp_path,
        {
            ".gitignore": "build/\n*_gen.py\n",
            "build/out.py": "",
            "src/model.py": "",
            "src/model_gen.py": "",
            "src/vendored/.gitignore": "*.py\n!keep.py\n",
            "src/vendored/drop.py": "",
            "src/vendored/keep.py": "",
        },
    )
    assert found(tmp_path, ["."]) == ["src/model.py", "src/vendored/keep.py"]
    # Linting a subdirectory still applies the repository root's .gitignore.
    assert found(tmp_path, ["src"]) == ["src/model.py", "src/vendored/keep.py"]
    assert found(tmp_path, ["."], gitignore=False) == [
        "build/out.py",
        "src/model.py",
        "src/model_gen.py",
        "src/vendored/drop.py",
        "src/vendored/keep.py",
    ]


def test_a_directory_named_inside_an_ignored_one_is_walked_as_ruff_does(tmp_path: Path) -> None:
    """`csan-lint .venv/lib/python3.11/site-packages/torch` from a repository that ignores `.venv/`."""
    (tmp_path / ".git").mkdir()
    make_tree(
        tmp_path, {".gitignore": "deps/\n*_gen.py\n", "deps/torch/a.py": "", "deps/torch/sub/b.py": "", "x.py": ""}
    )
    assert found(tmp_path, ["."]) == ["x.py"]
    assert found(tmp_path, ["deps/torch"]) == ["deps/torch/a.py", "deps/torch/sub/b.py"]


def test_explicit_files_are_always_linted(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    make_tree(tmp_path, {".gitignore": "build/\n", "build/out.py": "", "script": ""})
    assert found(tmp_path, ["build/out.py", "script"], exclude=("out.py",)) == ["build/out.py", "script"]


def test_config_exclude_patterns_are_relative_to_the_root(tmp_path: Path) -> None:
    make_tree(tmp_path, {"src/a.py": "", "src/legacy/b.py": "", "tests/src/legacy/c.py": ""})
    assert found(tmp_path, ["."], exclude=("/src/legacy/",)) == ["src/a.py", "tests/src/legacy/c.py"]
    assert found(tmp_path, ["."], exclude=("legacy",)) == ["src/a.py"]


def test_each_file_once_and_missing_paths_reported_in_order(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a.py": "", "pkg/b.py": ""})
    assert found(tmp_path, ["pkg", "nope.py", "pkg/b.py", "."]) == [
        "pkg/b.py",
        "no such file or directory:nope.py",
        "a.py",
    ]


def test_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    make_tree(tmp_path, {"pkg/a.py": ""})
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path / "pkg", target_is_directory=True)
    (tmp_path / "pkg" / "alias.py").symlink_to(tmp_path / "pkg" / "a.py")
    assert found(tmp_path, ["."]) == ["pkg/a.py", "pkg/alias.py"]


def test_an_unreadable_directory_is_reported_and_the_walk_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(tmp_path, {"a.py": "", "locked/b.py": "", "z.py": ""})
    real_scandir = os.scandir

    def scandir(path):  # chmod 0 does not stop root, who runs CI here
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert found(tmp_path, ["."]) == ["a.py", "cannot read directory: Permission denied:locked", "z.py"]


def test_display_path_is_relative_under_cwd_else_absolute(tmp_path: Path) -> None:
    assert display_path(tmp_path / "pkg" / "a.py", tmp_path) == "pkg/a.py"
    assert display_path(Path("/elsewhere/a.py"), tmp_path) == "/elsewhere/a.py"


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nwith torch.cuda.stream(s):\n    pass\n",
        "import torch.cuda as tc\nside = tc.Stream()\n",
        "from torch.cuda import stream as s_ctx, Stream\n",
        "from torch import cuda\nwith cuda.stream(s):\n    pass\n",
        "from torch import cuda as c\nc.Event()\n",
        "import torch\ntorch.cuda.streams.Stream()\n",
        "import torch\ng = torch.cuda.CUDAGraph()\n",
        "import torch\nwith torch.cuda.graph(g):\n    pass\n",
        "y = x.to('cpu', non_blocking=True)\n",
        "y = x.to('cpu', non_blocking=flag)\n",
        "import torch\ntorch.cuda.set_stream(s)\n",
        "import torch\ncur = torch.cuda.current_stream()\n",
        "import torch\ns = torch.Stream()\n",
        "import torch\ne = torch.Event()\n",
        "import torch\ntorch.accelerator.set_stream(s)\n",
        "import torch\ncur = torch.accelerator.current_stream()\n",
        "from torch import accelerator as acc\ncur = acc.current_stream()\n",
        "from torch import Stream\ns = Stream()\n",
        "from deepspeed.accelerator import get_accelerator\nwith get_accelerator().stream(s):\n    pass\n",
        "from deepspeed.accelerator import get_accelerator\naccel = get_accelerator()\ne = accel.Event()\n",
        "import torch\nmod = torch.get_device_module('cuda')\ns = mod.Stream()\n",
        "def f():\n    from torch.cuda import Stream\n    return Stream()\n",  # an import in a function
        "import torch\nx = 1\nfrom torch import accelerator\nacc = accelerator\ns = acc.current_stream()\n",
        "context.execute_async_v3(stream.cuda_stream)\n",  # a stream's raw handle, the stream passed in
    ],
)
def test_prefilter_keeps_every_spelling_of_the_stream_api(source: str) -> None:
    assert might_have_findings(source)


@pytest.mark.parametrize(
    "source",
    [
        "x = 1\n",
        "import io\nstream = io.BytesIO()\nevent = Event()\n",  # streams, but no CUDA
        "import torch\nx = torch.ones(3, device='cuda')\n",  # CUDA, but no stream API
        "y = x.to('cpu', non_blocking=False)\n",
        "from torch.cuda import amp\n",  # an aliasing import, but no stream word
        "import torch\ntorch.accelerator.is_available()\n",  # device-generic, but no stream API
        "from deepspeed.accelerator import get_accelerator\nget_accelerator().device_name()\n",
        "import torch\nx = torch.Tensor()\n",
        "import torch\ns = mytorch.Stream()\nt = my_accelerator.current_stream()\n",  # other objects' names
        "import torch\nx = 1  # from torch.cuda import Stream: not an import\n",
        "x = 1  # engine.run(stream.cuda_stream)\n",
    ],
)
def test_prefilter_drops_text_without_stream_usage(source: str) -> None:
    assert not might_have_findings(source)


def test_prefilter_keeps_calls_of_project_wrappers() -> None:
    source = "from mypkg.cuda_utils import on_stream\nwith on_stream(s):\n    pass\n"
    assert not might_have_findings(source)
    assert might_have_findings(source, frozenset({"on_stream"}))
    assert not might_have_findings("with on_stream_count(s):\n    pass\n", frozenset({"on_stream"}))


def test_prefilter_keeps_every_rules_invalid_examples() -> None:
    """The prefilter must never hide a finding: every example a rule flags passes it."""
    examples = [(rule.code, example.code) for rule in all_rules() for example in rule.INVALID]
    assert examples, "no rules discovered"
    dropped = [code for code, source in examples if not might_have_findings(source)]
    assert dropped == []


@pytest.mark.parametrize(
    "source",
    [
        '"""Run it under `with torch.cuda.stream(s):` and copy with non_blocking=True."""\nx = 1\n',
        "x = 1  # torch.cuda.current_stream() would be the stream here\n",
        "emit(f'{name} = torch.Event()')\nemit(\"torch.cuda.set_stream(s)\")\n",
        "DOC = r'''\ny = x.to('cpu', non_blocking=True)\n'''\n",
        "s = 'a \\' torch.cuda.Stream() \\' b'\n",
    ],
)
def test_prefilter_ignores_the_stream_api_in_strings_and_comments(source: str) -> None:
    assert not might_have_findings(source)


@pytest.mark.parametrize(
    "source",
    [
        "label = '#'\nwith torch.cuda.stream(s):\n    pass\n",  # a `#` in a string starts no comment
        'note = "it\'s"\ny = x.to("cpu", non_blocking=True)\n',
        "doc = '''a ' quote'''\ncur = torch.cuda.current_stream()\n",
        "text = 'unterminated\ns = torch.cuda.Stream()\n",  # broken: the rest stays code
    ],
)
def test_prefilter_keeps_stream_code_next_to_strings(source: str) -> None:
    assert might_have_findings(source)
