"""The documentation holds together: README.md stays a Space card, every relative link in it and
in docs/ leads somewhere (file and heading), every `docs/design.md §N` the code cites is a section
of docs/design.md, and the `python -m animegamer...` commands the pages show parse with today's
command lines. Nothing here loads a model."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_FOLDERS = ("animegamer", "tests", "benchmarks", "recipes")
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
DESIGN_REFERENCE = re.compile(r"docs/design\.md §(\d+)")
SECTION_HEADING = re.compile(r"^#{1,6}\s+§(\d+)\b")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation and symbols
    removed (letters, digits, `_`, `-` and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    kept = "".join(
        char for char in text
        if char in " -_" or unicodedata.category(char)[0] in "LNM"
    )
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            target = match[1]
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield number, target


def test_readme_is_a_short_space_card():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_expected_pages_exist():
    names = {page.name for page in PAGES}
    assert names >= {
        "README.md", "playing.md", "hardware.md", "characters.md", "training.md",
        "evaluation.md", "nano.md", "architecture.md", "design.md",
    }
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for number, target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not destination.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_the_slug_follows_github():
    assert slug("§9 The animation-shot encoder E_a") == "9-the-animation-shot-encoder-e_a"
    assert slug("Scripting the game (gradio_client)") == "scripting-the-game-gradio_client"
    assert slug("The release's `checkpoints`") == "the-releases-checkpoints"


def code_files() -> Iterator[Path]:
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".md", ".txt"}:
                yield path


def test_design_references_in_the_code_name_real_sections():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = {int(m[1]) for line in design.splitlines() if (m := SECTION_HEADING.match(line))}
    assert sections >= set(range(1, 14)), sorted(sections)
    missing, stale = [], []
    for path in code_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        missing += [f"{where}: §{n}" for n in DESIGN_REFERENCE.findall(text)
                    if int(n) not in sections]
        if path != Path(__file__).resolve() and "DESIGN §" in text:
            stale.append(str(where))
    assert not missing, f"sections not in docs/design.md: {missing}"
    assert not stale, f"'DESIGN §' instead of 'docs/design.md §': {stale}"


def shown_commands() -> Iterator[tuple[str, str]]:
    """(page:line, command) for every `python -m animegamer...` command in a fenced bash block
    (continuation lines joined) or in inline code with an option; commands with placeholders
    (`[...]`, `...`) are left out."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        language, pending, start = None, "", 0
        for number, line in enumerate(text.splitlines(), 1):
            fence = FENCE.match(line.lstrip())
            if fence:
                language = None if language is not None else line.strip()[3:].strip() or "text"
                pending = ""
                continue
            if language == "bash":
                start = start if pending else number
                pending += line.rstrip().removesuffix("\\") + " "
                if line.rstrip().endswith("\\"):
                    continue
                candidates, pending = [pending], ""
            elif language is None:
                start = number
                candidates = [span.strip("`") for span in INLINE_CODE.findall(line)
                              if " --" in span]
            else:
                continue
            for command in candidates:
                if re.search(r"-m animegamer\b", command) and "[" not in command \
                        and "..." not in command and "…" not in command:
                    yield f"{page.relative_to(ROOT)}:{start}", command


def command_parser(module: str) -> argparse.ArgumentParser | None:
    """The parser of `python -m module`, or None when the module builds it inside `main`."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"no module {module}"
    main = importlib.import_module(
        f"{module}.__main__" if spec.submodule_search_locations else module
    )
    factory = getattr(main, "build_parser", None) or getattr(main, "parser", None)
    assert callable(factory) or callable(getattr(main, "main", None)), f"{module} cannot run"
    return factory() if callable(factory) else None


def test_pages_show_commands():
    assert any(where.startswith("README.md") for where, _ in shown_commands())


@pytest.mark.parametrize(("where", "command"), list(shown_commands()))
def test_shown_commands_parse(where: str, command: str):
    words = shlex.split(command, comments=True)
    module_at = words.index("-m") + 1
    module, arguments = words[module_at], words[module_at + 1:]
    assert module.startswith("animegamer"), where
    parser = command_parser(module)
    if module == "animegamer.create" and arguments[:1] == ["example"]:
        from animegamer.create.__main__ import example_parser

        parser, arguments = example_parser(), arguments[1:]
    if parser is None:
        return
    try:
        parser.parse_args(arguments)
    except SystemExit as error:
        pytest.fail(f"{where}: `{command.strip()}` does not parse (exit {error.code})")
