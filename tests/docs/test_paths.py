"""The docs name only files that exist, and nothing in the tree points at files users do not have.

A repository path is recognised in README.md and docs/*.md wherever a reader would take it
for one: a word in inline code, a link target, or a word of a shell block, whose first
component is a top-level entry of the repository (``docs/X.md``, ``beameval/...``,
``examples/...``, ``setup.py``) or a package directory named without its package
(``inference/classify.py`` for ``beameval/inference/classify.py``), or a bare ``NAME.md``.
Placeholders (``OUT_DIR/results.json``, ``STORE/entries/*.jsonl``, ``gs://B/...``) start
with no such name and are not paths; ``<...>`` and ``{...}`` parts mark a pattern, not a
file; a glob must match at least one file.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("beameval", "pipeline", "transforms")
#: Example datasets a page defines itself (its ```jsonl blocks are their rows), not files of the repository.
EXAMPLE_FILES = {
    "docs/METRICS.md": {
        "data/qa_with_outputs.jsonl",
        "data/arithmetic.jsonl",
        "data/tool_calls.jsonl",
        "data/graded_answers.jsonl",
    },
}
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_EDGES = "()[],;:'\"|"


@functools.cache
def top_level() -> set[str]:
    """The repository's top-level entries, without what git ignores (``out/`` of ``run_local.sh``, ``.venv``)."""
    entries = {entry.name for entry in ROOT.iterdir() if not entry.name.startswith(".") or entry.name == ".ci"}
    ignored = subprocess.run(
        ["git", "check-ignore", "--stdin"], cwd=ROOT, input="\n".join(sorted(entries)), capture_output=True, text=True
    )
    return entries - set(ignored.stdout.split()) if ignored.returncode in (0, 1) else entries


def package_dirs() -> set[str]:
    return {sub.name for package in PACKAGES for sub in (ROOT / package).iterdir() if sub.is_dir()} - {"__pycache__"}


def words(text: str) -> list[str]:
    """Inline-code words, link targets and shell-block words of one page, in order."""
    found = []
    for language, body in _FENCE.findall(text):
        if language in SHELL_BLOCKS:
            found += body.split()
    prose = _FENCE.sub("", text)
    found += [word for span in _CODE.findall(prose) for word in span.split()]
    found += [target.split("#")[0] for target in _LINK.findall(text) if "://" not in target]
    return found


def candidate(word: str) -> str | None:
    """The repository path a word names, or None when it names none (a flag, a placeholder, a URL)."""
    word = word.split("=", 1)[-1].strip(_EDGES).removeprefix("./")
    word = re.sub(r"::.*$|:\d+$", "", word)  # tests/x.py::test_name, file.py:12
    if not word or "://" in word or "<" in word or "{" in word:
        return None
    first = word.split("/")[0]
    if first in top_level() or first in package_dirs() or re.fullmatch(r"[\w-]+\.md", word):
        return word
    return None


def exists(path: str, page: Path) -> bool:
    """``path`` names something: from the root, beside the page, or inside one of the packages (short form)."""
    bases = [ROOT, page.parent, *(ROOT / package for package in PACKAGES), ROOT / "docs"]
    return any(any(base.glob(path)) if "*" in path else (base / path).exists() for base in bases)


def dangling(page: Path) -> list[str]:
    where = page.relative_to(ROOT).as_posix()
    paths = {path for word in words(page.read_text(encoding="utf-8")) if (path := candidate(word))}
    return sorted(path for path in paths - EXAMPLE_FILES.get(where, set()) if not exists(path, page))


@pytest.mark.parametrize("page", DOCS, ids=[page.relative_to(ROOT).as_posix() for page in DOCS])
def test_every_path_a_page_names_exists(page: Path) -> None:
    assert dangling(page) == []


def test_the_example_files_are_named_where_they_are_defined() -> None:
    """An EXAMPLE_FILES entry no page names any more is a stale exemption."""
    for where, names in EXAMPLE_FILES.items():
        text = (ROOT / where).read_text(encoding="utf-8")
        assert all(f"`{name}`" in text for name in names), where


def test_the_matcher_sees_references_and_not_placeholders(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "See `docs/NOPE.md`, [the config](docs/CONFIG.md), `inference/nope.py`, `NOPE.md`, `tests/x.py::test_y`,\n"
        "`OUT_DIR/results.json`, `STORE/entries/*.jsonl`, `gs://B/qa.yaml`, `beameval/metrics/<name>.py`,\n"
        "`--setup_file=./setup.py`, `bench/results/*.nope`.\n\n"
        "```bash\npython bench/nope.py --config EVAL.yaml\n```\n\n```yaml\npath: data/qa.jsonl\n```\n"
    )
    assert dangling_in(page) == [
        "NOPE.md",
        "bench/nope.py",
        "bench/results/*.nope",
        "docs/NOPE.md",
        "inference/nope.py",
        "tests/x.py",
    ]


def dangling_in(page: Path) -> list[str]:
    paths = {path for word in words(page.read_text(encoding="utf-8")) if (path := candidate(word))}
    return sorted(path for path in paths if not exists(path, page))


#: Internal design notes users do not have; spelt apart so that this file passes too.
UNAVAILABLE = tuple(
    name + suffix
    for name, suffix in [
        ("CONTRACT", ".md"),
        ("REFERENCE_" + "BEHAVIOUR", ".md"),
        ("BEAM_" + "NOTES", ".md"),
        ("STYLE", ".md"),
        ("seed_metric_" + "execution", ".diff"),
        ("../", "shared"),
        ("/work/", "shared"),
    ]
)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".json", ".txt", ".cfg", ""}
SKIP_DIRS = {"__pycache__", "results", "out", "node_modules"}


def tree_files() -> list[Path]:
    """The project's own text files: no virtualenvs, caches, build output or benchmark results."""
    files = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        hidden = any(part.startswith(".") and part != ".ci" for part in parts)
        built = any(part in SKIP_DIRS or part.endswith(".egg-info") or "venv" in part for part in parts)
        if path.is_file() and not hidden and not built and path.suffix in TEXT_SUFFIXES:
            files.append(path)
    return files


def test_nothing_points_at_files_users_do_not_have() -> None:
    """Docs, docstrings, comments and tests stand alone: users have no internal design notes."""
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in tree_files()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        if any(name in line for name in UNAVAILABLE)
    ]
    assert hits == []


def test_git_ignored_folders_are_not_repository_paths():
    """``run_local.sh`` leaves ``out/``: a page's ``out/results.json`` is a placeholder, not a dangling path."""
    folder = ROOT / "out"
    created = not folder.exists()
    folder.mkdir(exist_ok=True)
    top_level.cache_clear()
    try:
        assert "out" not in top_level() and "docs" in top_level()
        assert candidate("out/results.json") is None
    finally:
        if created:
            folder.rmdir()
        top_level.cache_clear()
