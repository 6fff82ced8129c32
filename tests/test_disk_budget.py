"""What a player writes on the server is bounded: one current save and export per game, a byte
budget per player and for the server, and a clean folder after a crash.

Turns run on the preview engine; long games are made of copies of one real clip, one file per
turn as a played game has them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gradio as gr
import pytest
from conftest import QIQI_FIELDS, QIQI_VALUES, free_port
from gradio_client import Client
from gradio_client.utils import Status

from animegamer.game.rules import MAX_GAME_TURNS, record_turn
from animegamer.serving.clips import LOCK_FILE, PLAYERS_FOLDER, ClipStore, bytes_under
from animegamer.serving.settings import Settings
from animegamer.ui import GameUI
from animegamer.ui.disk import DiskBudget
from animegamer.ui.events import Pending, play_pending
from animegamer.ui.state import Player

QIQI = QIQI_FIELDS
MB = 1 << 20


@pytest.fixture(scope="module")
def registry():
    from animegamer.characters.registry import load_registry

    return load_registry()


def fresh_ui(registry, tmp_path: Path, steps: int = 2) -> GameUI:
    """A UI on the preview models with a folder of its own (so its sizes are its own), deleting
    at once (no grace period) and with the shipped budget."""
    from animegamer.serving.stand_ins import create_preview_engine

    settings = Settings(engine="preview", preview_steps=steps, output_dir=tmp_path / "out")
    return GameUI(create_preview_engine(settings), registry, delete_grace_s=0)


def game_files(ui: GameUI, player: Player, kind: str) -> list[Path]:
    folder = ui.root / PLAYERS_FOLDER / player.player_id / player.session.session_id / kind
    return sorted(folder.iterdir()) if folder.is_dir() else []


def long_game(ui: GameUI, player: Player, turns: int) -> Player:
    """`player` with a game of `turns` turns, each with its own copy of the first turn's clip in
    the game's folder."""
    first = player.session.turns[0]
    session = dataclasses.replace(player.session, turns=player.session.turns[:1])
    folder = ui.files.game_folder(session.session_id)
    while len(session.turns) < turns:
        copy = folder / f"turn_{len(session.turns) + 1:04d}_copy.mp4"
        shutil.copyfile(first.clip_path or "", copy)
        session = record_turn(
            session, instruction=first.instruction, states=first.states,
            motion_scope_value=first.motion_scope, representation=session.representations[-1],
            seed=first.seed, clip_path=str(copy), timings=first.timings,
        )
    return dataclasses.replace(player, session=session)


# One current save and export per game -----------------------------------------------------------


def test_ten_saves_and_exports_of_a_game_leave_one_of_each(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = ui.turns.play(None, QIQI, "", "1").player
    for round_ in range(10):
        if round_ % 3 == 2:  # the game changes now and then: a new save replaces the old one
            player = ui.turns.play(player, QIQI, "", str(round_)).player
        saved, exported = Path(ui.saves.save(player)), Path(ui.saves.playthrough(player))
        assert saved.is_file() and exported.is_file()
        assert game_files(ui, player, "saves") == [saved]
        assert game_files(ui, player, "exports") == [exported]
    assert len(player.session.turns) == 4


def test_an_unchanged_game_reuses_its_save_and_a_changed_one_replaces_it(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = ui.turns.play(None, QIQI, "", "1").player
    first = Path(ui.saves.save(player))
    written = first.stat().st_mtime_ns
    time.sleep(0.01)
    assert Path(ui.saves.save(player)) == first and first.stat().st_mtime_ns == written
    undone = ui.turns.undo(ui.turns.play(player, QIQI, "", "2").player).player
    replayed = ui.turns.play(undone, QIQI, "", "2").player  # same turn count and seed, a new clip
    second = Path(ui.saves.save(replayed))
    assert second != first and not first.exists()


def test_restart_and_the_dropped_previous_game_free_their_saves_and_exports(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = ui.turns.play(None, QIQI, "", "1").player
    files = [Path(ui.saves.save(player)), Path(ui.saves.playthrough(player))]
    clips = ui.files.game_folder(player.session.session_id)
    player = ui.games.restart(player).player  # the game is kept to go back to
    assert all(path.exists() for path in files) and clips.exists()
    player = ui.games.restart(ui.turns.play(player, QIQI, "", "2").player).player  # it drops out
    assert not any(path.exists() for path in files) and not clips.exists()


# A player's budget ------------------------------------------------------------------------------


def test_a_1000_turn_game_saved_and_exported_stays_within_the_documented_budget(registry, tmp_path):
    documented = Settings().player_disk_mb * MB
    ui = fresh_ui(registry, tmp_path)
    assert ui.disk.budget.player_bytes == documented
    player = long_game(ui, ui.turns.play(None, QIQI, "", "1").player, MAX_GAME_TURNS)
    player = ui.games.restart(player).player  # kept as the game to go back to: it still counts
    player = long_game(ui, ui.turns.play(player, QIQI, "", "2").player, MAX_GAME_TURNS)
    downloads = [Path(ui.saves.save(player)), Path(ui.saves.playthrough(player))]
    sessions = (player.session, player.previous_game)
    used = ui.files.player_bytes(player.player_id, sessions)
    assert used == bytes_under([ui.root])  # every file on the server is this player's
    assert used <= documented
    clips = [ui.files.game_folder(game.session_id) for game in sessions if game]
    assert used == bytes_under(clips) + bytes_under(downloads)


def test_a_save_over_the_players_budget_is_refused_and_nothing_stays(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = long_game(ui, ui.turns.play(None, QIQI, "", "1").player, 200)
    clips = bytes_under([ui.root])
    ui.disk.budget = DiskBudget(player_bytes=clips + clips // 2, total_bytes=100 * clips)
    with pytest.raises(gr.Error) as refused:
        ui.saves.save(player)
    assert refused.value.title == "Your storage is full"
    assert "so the game was not saved; your game is unchanged" in str(refused.value)
    assert game_files(ui, player, "saves") == []
    assert bytes_under([ui.root]) == clips
    ui.disk.budget = DiskBudget(player_bytes=3 * clips, total_bytes=100 * clips)
    assert Path(ui.saves.save(player)).is_file()


def test_a_save_frees_the_players_other_downloads_before_refusing(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = long_game(ui, ui.turns.play(None, QIQI, "", "1").player, 100)
    exported = Path(ui.saves.playthrough(player))
    clips = bytes_under([ui.files.game_folder(player.session.session_id)])
    ui.disk.budget = DiskBudget(player_bytes=clips * 2 + clips // 2, total_bytes=100 * clips)
    saved = Path(ui.saves.save(player))  # the export goes to make room for it
    assert saved.is_file() and not exported.exists()
    assert ui.files.player_bytes(player.player_id, [player.session]) <= ui.disk.budget.player_bytes


def test_a_turn_over_the_players_budget_is_not_kept(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    player = ui.turns.play(None, QIQI, "", "1").player
    used = bytes_under([ui.root])
    ui.disk.budget = DiskBudget(player_bytes=used + 1, total_bytes=100 * used)
    with pytest.raises(gr.Error, match="so this turn was not kept; your game is unchanged"):
        ui.turns.play(player, QIQI, "", "2")
    assert bytes_under([ui.root]) == used
    assert sorted(ui.files.game_folder(player.session.session_id).iterdir()) == [
        Path(player.session.turns[0].clip_path or "")
    ]


# The server's budget ----------------------------------------------------------------------------


def test_the_server_budget_evicts_other_players_downloads_of_the_idlest_games_first(
    registry, tmp_path
):
    ui = fresh_ui(registry, tmp_path)
    idle = ui.turns.play(None, QIQI, "", "1").player
    idle_files = [Path(ui.saves.save(idle)), Path(ui.saves.playthrough(idle))]
    recent = ui.turns.play(None, QIQI, "", "2").player
    recent_files = [Path(ui.saves.save(recent)), Path(ui.saves.playthrough(recent))]
    old = time.time() - 600
    for path in [*idle_files, *ui.files.game_folder(idle.session.session_id).iterdir()]:
        os.utime(path, (old, old))
    me = ui.turns.play(None, QIQI, "", "3").player
    total = ui.files.total_bytes()
    ui.disk.budget = DiskBudget(player_bytes=total, total_bytes=total)
    mine = Path(ui.saves.save(me))
    assert mine.is_file()
    assert not any(path.exists() for path in idle_files)
    assert all(path.exists() for path in recent_files)
    assert Path(idle.session.turns[0].clip_path or "").is_file()  # clips are the game: kept


def test_a_server_full_of_games_refuses_a_turn_and_keeps_the_game(registry, tmp_path):
    ui = fresh_ui(registry, tmp_path)
    other = ui.turns.play(None, QIQI, "", "1").player
    player = ui.turns.play(None, QIQI, "", "2").player
    total = ui.files.total_bytes()
    ui.disk.budget = DiskBudget(player_bytes=total, total_bytes=total)
    with pytest.raises(gr.Error) as refused:
        ui.turns.play(player, QIQI, "", "3")
    assert refused.value.title == "Server storage full"
    assert "is used up, so no turn was played. Your game is unchanged" in str(refused.value)
    assert ui.files.total_bytes() == total
    assert Path(other.session.turns[0].clip_path or "").is_file()


def test_the_budget_settings_come_from_the_environment():
    settings = Settings.from_env({"ANIMEGAMER_PLAYER_DISK_MB": "10", "ANIMEGAMER_DISK_MB": "50"})
    assert DiskBudget.of(settings) == DiskBudget(10 * MB, 50 * MB)
    with pytest.raises(ValueError, match=r"PLAYER_DISK_MB must be in 1\.\.ANIMEGAMER_DISK_MB"):
        Settings.from_env({"ANIMEGAMER_PLAYER_DISK_MB": "60", "ANIMEGAMER_DISK_MB": "50"})


# Abandoned turns and a clean start --------------------------------------------------------------


def test_a_turn_whose_event_goes_away_is_abandoned_with_its_clip(registry, tmp_path):
    from animegamer.ui.state import GameSlot

    ui = fresh_ui(registry, tmp_path, steps=8)  # a turn that reports previews
    slot = GameSlot(ui.root, ui.turns.play(None, QIQI, "", "1").player)
    before = slot.player
    pending = Pending("", ui.read(before.session, "quickly fly on broomstick, day sky"))
    turn = play_pending(ui, slot, pending, "2", progress=None)
    assert isinstance(next(turn)[-1], str)  # a preview: the turn runs in its worker thread
    turn.close()  # what Gradio does when the tab closes or the turn is cancelled
    assert slot.read(lambda current: current) is before  # read once the worker's turn ended
    assert list(ui.files.game_folder(before.session.session_id).iterdir()) == [
        Path(before.session.turns[0].clip_path or "")
    ]


def test_claim_empties_a_folder_no_running_server_holds(tmp_path):
    left = tmp_path / "out"
    (left / "abc123").mkdir(parents=True)
    (left / "abc123" / "turn_0001_1_aaaaaa.mp4").write_bytes(b"x" * 100)
    (left / PLAYERS_FOLDER / "p1" / "abc123" / "saves").mkdir(parents=True)
    store = ClipStore(left)
    assert store.claim()
    assert [path.name for path in left.iterdir()] == [LOCK_FILE]
    again = ClipStore(left)
    (left / "new-game").mkdir()
    assert not again.claim()  # this process's store holds it: a running server
    assert (left / "new-game").is_dir()


SERVER = """
import sys
from animegamer.ui import create_app
demo, options = create_app()
demo.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]), **options)
"""


def test_kill_9_during_a_turn_then_restart_leaves_no_dead_games_files(tmp_path, repo_root):
    out = tmp_path / "out"
    port = free_port()
    environ = {
        **os.environ, "ANIMEGAMER_ENGINE": "preview", "ANIMEGAMER_PREVIEW_STEPS": "2",
        "ANIMEGAMER_OUTPUT_DIR": str(out),
    }
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)], cwd=repo_root, env=environ,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = _connect(f"http://127.0.0.1:{port}/", server)
        client.predict(*QIQI_VALUES, "", "1", api_name="/play")
        client.predict(api_name="/save")
        turn = client.submit(*QIQI_VALUES, "", "2", api_name="/play")
        deadline = time.monotonic() + 60
        while turn.status().code != Status.PROGRESS:  # the turn reports its first stage
            assert time.monotonic() < deadline and not turn.done(), "the turn never started"
            time.sleep(0.005)
        assert not ClipStore(out).claim()  # the server runs: nothing of its is touched
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
    finally:
        server.kill()
    assert {path.name for path in out.iterdir()} > {LOCK_FILE, PLAYERS_FOLDER}
    from animegamer.ui import create_app

    demo, _ = create_app({k: v for k, v in environ.items() if k.startswith("ANIMEGAMER_")})
    try:
        assert [path.name for path in out.iterdir()] == [LOCK_FILE]
    finally:
        demo.close()


def _connect(url: str, server: subprocess.Popen) -> Client:
    deadline = time.monotonic() + 240
    while True:
        assert server.poll() is None, "the server exited"
        try:
            return Client(url, verbose=False)
        except Exception:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(1)

