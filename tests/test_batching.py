"""Turns of several players played as one batch: the engine's `play_batch` (a clip does not
depend on its batch; a failing turn fails alone) and the `TurnBatcher` that gathers them
(who waits for whom, withdrawals, progress in the player's own thread, the queue's place)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import QIQI_FIELDS

from animegamer.characters.registry import load_registry
from animegamer.game.rules import make_instruction, new_session
from animegamer.serving.batching import (
    BatchSettings,
    QueuePlace,
    TurnBatcher,
    TurnWithdrawn,
    batch_settings,
)
from animegamer.serving.devices import CPU_PLACEMENT, Placement
from animegamer.serving.engine import TurnRequest
from animegamer.serving.settings import Settings, SettingsError
from animegamer.ui import GameUI
from animegamer.ui.contracts import gpu_seconds
from animegamer.ui.story import progress_text, queue_text

MOTIONS = ("fly on broomstick", "sit on railing", "walk through the town", "lie down on grass")


def _instruction(index: int):
    return make_instruction({
        "character": "Qiqi", "adverb": ("quickly", "slowly")[index % 2],
        "motion": MOTIONS[index % len(MOTIONS)], "time": "day", "place": "town",
    })


def _request(index: int, seed: int | None = None, character: str = "Qiqi") -> TurnRequest:
    return TurnRequest(new_session(character), _instruction(index), 100 + index if seed is None
                       else seed)


# The engine's batch ------------------------------------------------------------------------


def test_a_clip_is_the_same_alone_and_in_a_batch_of_8(preview_engine):
    requests = [_request(index) for index in range(8)]
    batched = preview_engine.play_batch(requests)
    alone = preview_engine.play(requests[5].session, requests[5].instruction, seed=105)
    assert all(not isinstance(outcome, Exception) for outcome in batched)
    fifth = batched[5].turns[-1]
    assert Path(fifth.clip_path).read_bytes() == Path(alone.turns[-1].clip_path).read_bytes()
    assert fifth.seed == 105 and fifth.states == alone.turns[-1].states
    torch.testing.assert_close(batched[5].representations[-1], alone.representations[-1],
                               rtol=0, atol=0)
    # each session got exactly its own turn
    for request, outcome in zip(requests, batched, strict=True):
        assert outcome.session_id == request.session.session_id
        assert [turn.instruction for turn in outcome.turns] == [request.instruction]
        assert request.session.turns == ()


def test_a_bad_turn_fails_alone_in_its_batch(preview_engine):
    requests = [_request(0), _request(1, seed=-3), _request(2)]
    outcomes = preview_engine.play_batch(requests)
    assert isinstance(outcomes[1], ValueError) and "seed" in str(outcomes[1])
    assert [len(outcomes[i].turns) for i in (0, 2)] == [1, 1]


def test_a_batch_that_fails_is_rendered_shot_by_shot(preview_engine, monkeypatch):
    """A batched render that raises (e.g. out of memory) is retried one shot at a time: the
    turns still land, with the clips they get alone."""
    decoder = preview_engine.models_for("Qiqi").decoder
    render = type(decoder).__call__

    def no_batches(self, representation, *args, **kwargs):
        if len(representation) > 1:
            raise torch.OutOfMemoryError("no room for a batch")
        return render(self, representation, *args, **kwargs)

    monkeypatch.setattr(type(decoder), "__call__", no_batches)
    outcomes = preview_engine.play_batch([_request(0), _request(1)])
    alone = preview_engine.play(new_session("Qiqi"), _instruction(1), seed=101)
    assert Path(outcomes[1].turns[-1].clip_path).read_bytes() == \
        Path(alone.turns[-1].clip_path).read_bytes()


def test_a_batch_plays_one_character(preview_engine):
    with pytest.raises(ValueError, match="one character"):
        preview_engine.play_batch([_request(0), _request(1, character="Sosuke")])


# The batcher ------------------------------------------------------------------------------


class RecordingBatches:
    """A `play_batch` that records each batch's requests and takes `seconds` to play it."""

    def __init__(self, seconds: float = 0.0, fail: int | None = None) -> None:
        self.seconds, self.fail = seconds, fail
        self.batches: list[list[TurnRequest]] = []

    def __call__(self, requests):
        self.batches.append(list(requests))
        for request in requests:
            request.report(0.5, "Denoising step 1/2")
        time.sleep(self.seconds)
        return [
            ValueError("this one") if request.seed == self.fail
            else dataclasses.replace(request.session, window=2)
            for request in requests
        ]


def _play_together(batcher, requests, arguments=None):
    """Each request played from its own thread, all at once; their outcomes in order."""
    outcomes: list[object] = [None] * len(requests)

    def play(index):
        try:
            outcomes[index] = batcher.play(requests[index], **(arguments or {}).get(index, {}))
        except Exception as error:
            outcomes[index] = error

    threads = [threading.Thread(target=play, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return outcomes


def test_turns_waiting_together_play_as_one_batch():
    play = RecordingBatches()
    batcher = TurnBatcher(play, BatchSettings(max_batch_size=8, max_wait_s=2.0))
    started = time.monotonic()
    outcomes = _play_together(batcher, [_request(i) for i in range(8)])
    assert time.monotonic() - started < 1.5  # a full batch does not wait out max_wait_s
    assert batcher.batch_sizes == {8: 1}
    assert all(outcome.window == 2 for outcome in outcomes)


def test_a_batch_holds_at_most_its_size_and_one_character():
    play = RecordingBatches(seconds=0.05)
    batcher = TurnBatcher(play, BatchSettings(max_batch_size=3, max_wait_s=0.3))
    requests = [_request(i, character=("Qiqi", "Sosuke")[i % 2]) for i in range(8)]
    _play_together(batcher, requests)
    assert sum(len(batch) for batch in play.batches) == 8
    for batch in play.batches:
        assert len(batch) <= 3
        assert len({request.session.character for request in batch}) == 1


def test_a_failing_turn_fails_alone_in_the_batcher():
    batcher = TurnBatcher(RecordingBatches(fail=102), BatchSettings(4, 1.0))
    outcomes = _play_together(batcher, [_request(i) for i in range(4)])
    assert isinstance(outcomes[2], ValueError)
    assert [outcome.window for i, outcome in enumerate(outcomes) if i != 2] == [2, 2, 2]


def test_a_batch_that_raises_fails_its_turns_and_the_next_ones_play():
    calls = []

    def play(requests):
        calls.append(len(requests))
        if len(calls) == 1:
            raise RuntimeError("the GPU went away")
        return [request.session for request in requests]

    batcher = TurnBatcher(play, BatchSettings(1, 0.0))
    with pytest.raises(RuntimeError, match="went away"):
        batcher.play(_request(0))
    assert batcher.play(_request(1)).session_id
    assert calls == [1, 1]


def test_a_withdrawn_turn_is_never_played_and_does_not_hold_the_others():
    """Player 1's event goes away while it waits behind a running batch: it is taken off the
    line, and the next batch is played without it."""
    play = RecordingBatches(seconds=0.4)
    batcher = TurnBatcher(play, BatchSettings(max_batch_size=1, max_wait_s=0.0))
    withdrawn = threading.Event()
    threading.Timer(0.2, withdrawn.set).start()
    outcomes = _play_together(batcher, [_request(0), _request(1), _request(2)],
                              {1: {"withdrawn": withdrawn}})
    # thread start order decides who leads; the withdrawn one is never played either way
    played = [request.seed for batch in play.batches for request in batch]
    assert 101 not in played and sorted(played) == [100, 102]
    assert isinstance(outcomes[1], TurnWithdrawn)


def test_progress_reaches_each_player_in_its_own_thread():
    seen: dict[int, set[int]] = {}

    def request(index):
        def progress(fraction, description):
            seen.setdefault(index, set()).add(threading.get_ident())
        return TurnRequest(new_session("Qiqi"), _instruction(index), index, progress)

    batcher = TurnBatcher(RecordingBatches(), BatchSettings(4, 1.0))
    threads = {}

    def play(index):
        threads[index] = threading.get_ident()
        batcher.play(request(index))

    workers = [threading.Thread(target=play, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert batcher.batch_sizes == {4: 1}
    assert seen == {index: {threads[index]} for index in range(4)}


def test_a_waiting_turn_is_told_its_place_and_the_measured_wait():
    clock = [0.0]
    batcher = TurnBatcher(RecordingBatches(), BatchSettings(2, 0.0), clock=lambda: clock[0])
    batcher.play(_request(0))  # one batch timed: 0 s on this clock
    places: list[QueuePlace] = []
    blocker = threading.Event()

    def slow(requests):
        clock[0] += 10.0
        blocker.wait(5)
        return [request.session for request in requests]

    batcher._play_batch = slow
    first = threading.Thread(target=batcher.play, args=(_request(1),))
    first.start()
    while not batcher._running:
        time.sleep(0.01)
    waiter = threading.Thread(target=batcher.play, args=(_request(2),),
                              kwargs={"on_queue": places.append})
    waiter.start()
    time.sleep(0.3)
    blocker.set()
    first.join(5)
    waiter.join(5)
    assert places[0] == QueuePlace(ahead=1, eta_s=0.0)


def test_the_queue_says_where_a_turn_stands():
    assert queue_text(QueuePlace(3, 12.4)) == "Waiting for 3 turns ahead of yours · about 12 s"
    assert queue_text(QueuePlace(1, None)) == "Waiting for 1 turn ahead of yours"
    # the turn's own estimate is not added to the queue's
    assert progress_text(queue_text(QueuePlace(1, 4.0)), 0.0, 30.0).endswith("about 4 s")


# Settings ---------------------------------------------------------------------------------


def test_batch_settings_come_from_the_environment_and_low_vram_plays_alone():
    settings = Settings.from_env({"ANIMEGAMER_MAX_BATCH": "4", "ANIMEGAMER_BATCH_WAIT_S": "0.5"})
    assert batch_settings(settings, CPU_PLACEMENT) == BatchSettings(4, 0.5)
    offloaded = Placement(device="cuda", game_state_dtype=torch.bfloat16,
                          decoder_dtype=torch.float16, offload=True)
    assert batch_settings(settings, offloaded).max_batch_size == 1
    for name, value in (("ANIMEGAMER_MAX_BATCH", "0"), ("ANIMEGAMER_MAX_BATCH", "33"),
                        ("ANIMEGAMER_BATCH_WAIT_S", "-1")):
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: value})


def test_zero_gpu_reserves_time_for_the_whole_batch():
    assert gpu_seconds(12) == 32
    assert gpu_seconds(12, batch_size=4) == 20 + 48
    assert gpu_seconds(50, batch_size=8) == 300  # capped


# Through the game's actions -----------------------------------------------------------------


def test_8_players_pressing_play_at_once_share_one_batch_and_keep_their_own_games(
    preview_engine, caplog
):
    """Eight players' turns through `TurnActions.play`, as the app's events call it: one
    batch, every game holds exactly its own turn, with its own seed and clip."""
    ui = GameUI(preview_engine, load_registry(), batching=BatchSettings(8, 5.0))
    players = [ui.new_player() for _ in range(8)]
    updates: list[object] = [None] * 8
    start = threading.Barrier(8)

    def press(index: int) -> None:
        start.wait()
        fields = {**QIQI_FIELDS, "motion": MOTIONS[index % len(MOTIONS)]}
        updates[index] = ui.turns.play(players[index], fields, "", str(index + 1))

    caplog.set_level(logging.INFO, logger="animegamer.serving.batching")
    threads = [threading.Thread(target=press, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert "played 8 turns of Qiqi in one batch" in caplog.text
    clips = set()
    for index, (player, update) in enumerate(zip(players, updates, strict=True)):
        (turn,) = update.player.session.turns
        assert update.player.session.session_id == player.session.session_id
        assert turn.seed == index + 1
        assert turn.instruction.motion == MOTIONS[index % len(MOTIONS)]
        clips.add(Path(turn.clip_path).read_bytes())
        assert player.session.turns == ()
    assert len(clips) == 8


class SlowBatches:
    """The preview engine, its batches held for `seconds` first."""

    def __init__(self, engine, seconds: float) -> None:
        self.engine, self.seconds = engine, seconds

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def play_batch(self, requests, num_inference_steps=None):
        time.sleep(self.seconds)
        return self.engine.play_batch(requests, num_inference_steps)


def test_a_player_waiting_behind_another_turn_sees_the_queue_then_the_turn(preview_engine):
    """One turn at a time: the second player's progress first says where the turn stands
    (1 turn ahead; the first batch's measured time as the estimate), then the turn's stages."""
    ui = GameUI(SlowBatches(preview_engine, 0.6), load_registry(),
                batching=BatchSettings(1, 0.0))
    ui.turns.play(ui.new_player(), QIQI_FIELDS, "", "1")  # times one batch
    seen: list[str] = []
    first = threading.Thread(target=ui.turns.play, args=(ui.new_player(), QIQI_FIELDS, "", "2"))
    first.start()
    time.sleep(0.2)
    ui.turns.play(ui.new_player(), QIQI_FIELDS, "", "3",
                  lambda fraction, desc=None: seen.append(desc or ""))
    first.join(10)
    assert seen[0].startswith("Waiting for 1 turn ahead of yours · about ")
    assert any(text.startswith("Imagining the next moment") for text in seen[1:])
