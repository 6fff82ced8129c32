"""Every `--flag` the docs name is accepted by its command: the commands written out in README.md
and docs/*.md, the options the data build's paragraph lists, and the cut detection's and
answers' options, which `create` and `data build` share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from animegamer.create.__main__ import main as create_main
from animegamer.data.__main__ import main as data_main

DOCS = [Path("README.md"), *sorted(Path("docs").glob("*.md"))]
FLAG = re.compile(r"--[a-z][a-z-]*[a-z]")
COMMANDS = {"create": ("animegamer.create", create_main, []),
            "data build": ("animegamer.data build", data_main, ["build"])}


def accepted(command: str, capsys) -> set[str]:
    """The options `command --help` lists."""
    _, main, argv = COMMANDS[command]
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = capsys.readouterr().out
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", text, re.MULTILINE))


def written_commands() -> list[tuple[str, str, str]]:
    """(doc, command, line) of each command line written in the docs (continuations joined);
    `create example` is a command of its own and left out."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        for line in text.splitlines():
            for command, (module, _, _) in COMMANDS.items():
                if f"-m {module} " in line and "animegamer.create example" not in line:
                    found.append((str(doc), command, line))
    return found


def section(doc: str, start: str, end: str) -> str:
    text = Path(doc).read_text(encoding="utf-8")
    begin = text.index(start)
    return text[begin : text.index(end, begin + len(start))]


def test_the_docs_write_out_both_commands():
    commands = {command for _, command, _ in written_commands()}
    assert commands == {"create", "data build"}


def test_each_written_command_uses_only_its_options(capsys):
    options = {command: accepted(command, capsys) for command in COMMANDS}
    for doc, command, line in written_commands():
        unknown = set(FLAG.findall(line)) - options[command]
        assert not unknown, f"{doc}: {command} has no {sorted(unknown)}: {line.strip()}"


def test_the_data_builds_options_paragraph(capsys):
    named = set(FLAG.findall(section("docs/training.md", "What `build` does", "\n\n")))
    assert {"--cut-threshold", "--discontinuity-threshold", "--allow-unmatched"} <= named
    assert named <= accepted("data build", capsys)


def test_your_own_footage_options_exist_and_the_shared_ones_on_both_commands(capsys):
    footage = section("docs/characters.md", "### Your own footage", "### At paper scale")
    create, build = accepted("create", capsys), accepted("data build", capsys)
    assert set(FLAG.findall(footage)) <= create | build
    shared = section("docs/characters.md", "Every answer is accounted for", "Bad input:")
    knobs = set(FLAG.findall(shared))
    assert {"--cut-threshold", "--adaptive-threshold", "--discontinuity-threshold",
            "--allow-unmatched"} <= knobs
    assert knobs <= create & build


def test_the_cut_options_reach_the_build_from_both_commands(tmp_path, capsys):
    from PIL import Image

    from animegamer.data.shots import CutOptions

    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "a.mp4").write_bytes(b"")  # no video: the build records its options
    Image.new("RGB", (8, 8)).save(tmp_path / "ref.png")
    (tmp_path / "answers.jsonl").write_text("")
    flags = ["--cut-threshold", "30", "--adaptive-threshold", "3", "--discontinuity-threshold",
             "0.6"]
    common = ["--videos", str(tmp_path / "videos"), "--character", "Kiki", "--reference-image",
              str(tmp_path / "ref.png"), "--annotations", str(tmp_path / "answers.jsonl")]
    assert data_main(["build", *common, "--out", str(tmp_path / "d"), *flags]) == 0
    options = (tmp_path / "d" / "work" / "options.json").read_text()
    assert '"discontinuity_threshold": 0.6' in options and '"content_threshold": 30.0' in options

    from animegamer.create.pipeline import CreateOptions, prepare

    prepared = prepare(CreateOptions(tmp_path / "videos", "Kiki", tmp_path / "ref.png",
                                     tmp_path / "out", annotations=tmp_path / "answers.jsonl",
                                     cuts=CutOptions(30, 3, 0.6)))
    assert prepared.build.extract.cuts == CutOptions(30, 3, 0.6)
    with pytest.raises(SystemExit) as stopped:
        create_main([*common, "--out", str(tmp_path / "o"), "--discontinuity-threshold", "2"])
    assert stopped.value.code == 2
    assert "--discontinuity-threshold: 2: a number from 0 to 1 is needed" in (
        capsys.readouterr().err)
