"""The UI's actions as plain functions of (player state, inputs) → (new state, outputs).

Nothing here needs a browser or a running server: `GameUI` takes the engine and the registry,
and every action returns an `Update` (the new `Player` and what the screen shows) or raises
`gr.Error` with a message for the player, in which case the caller keeps its old state — Gradio
does not store the state of an event that raised. Game state lives only in `Player` values, one
per browser session; the engine holds models, never games.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import html
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import shorten
from typing import Any, NamedTuple, Protocol

import gradio as gr
import numpy as np
import pandas as pd
import spaces
import torch

from animegamer.characters.registry import Character, Registry, RegistryError
from animegamer.command.parser import (
    ClosedVocabulary,
    InstructionContext,
    OtherCharacterError,
    check_instruction,
    format_command,
    game_context,
    read_instruction,
    with_word,
)
from animegamer.game.rules import (
    Instruction,
    InstructionError,
    SeedError,
    Session,
    check_room_for_turn,
    make_instruction,
    new_session,
    parse_seed,
    turn_note,
    undo,
)
from animegamer.game.savefile import SaveFileError, TurnCheck, load_game, save_game
from animegamer.serving.clips import DELETE_GRACE_S, ClipStore
from animegamer.serving.devices import Placement
from animegamer.serving.engine import Casting, EngineError
from animegamer.serving.memory import release_free_memory
from animegamer.serving.settings import Settings
from animegamer.ui import views
from animegamer.ui.chips import vocabulary_for
from animegamer.ui.story import eta_seconds, progress_text
from animegamer.video.playthrough import PlaythroughError, concat_mp4

logger = logging.getLogger(__name__)

GPU_BASE_SECONDS = 20
GPU_SECONDS_PER_STEP = 1.0
GPU_MAX_SECONDS = 300
MAX_NAME_CHARS = 100
PICKER_REASON_CHARS = 80
SESSION_TTL_S = 3 * 3600
"""A browser session's game is forgotten after this long without an action."""
SESSION_FILES_MAX_AGE_S = SESSION_TTL_S + 3600
"""Files untouched this long belong to no live game (Gradio keeps a closed tab's state 1 h)."""
SWEEP_INTERVAL_S = 3600
ACTION_WAIT_S = GPU_MAX_SECONDS + 60
"""How long an action waits for the same game's running action (at most a whole turn)."""


class Progress(Protocol):
    """`gr.Progress`: called as `progress(fraction, desc=...)`."""

    def __call__(self, progress: float, desc: str | None = None) -> Any: ...


class ClipPreview(Protocol):
    """What a turn hands to its `on_preview` while the clip denoises (the engine's
    `animegamer.models.latent_preview.ClipPreview`): small uint8 frames [n, h, w, 3] of the
    clip's current estimate (its first, middle and last frame), after `step` of `num_steps`
    denoising steps."""

    @property
    def frames(self) -> np.ndarray: ...

    @property
    def step(self) -> int: ...

    @property
    def num_steps(self) -> int: ...


PreviewCallback = Callable[[ClipPreview], None]


class TurnRunner(Protocol):
    def __call__(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session: ...


class Engine(Protocol):
    """What the UI needs of `animegamer.serving.engine.GameEngine` (or of one `TurnEngine`)."""

    @property
    def kind(self) -> str: ...

    def casting(self, character: str) -> Casting: ...

    @property
    def notice(self) -> str: ...
    @property
    def num_inference_steps(self) -> int: ...
    @property
    def clips(self) -> ClipStore: ...
    @property
    def placement(self) -> Placement: ...
    @property
    def representation_dim(self) -> int | None: ...
    @property
    def live_preview(self) -> bool: ...

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None: ...

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: Callable[[float, str], None] | None = None,
        num_inference_steps: int | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session: ...


def shows_live_preview(engine: Engine) -> bool:
    """Whether the engine's turns report the clip as it forms (`engine.play(...,
    on_preview=...)`), with its live-preview setting on. ZeroGPU plays a turn in another
    process, where a callback into this one cannot reach."""
    return engine.live_preview and not engine.placement.zero_gpu


@dataclass(frozen=True, eq=False)
class Player:
    """One browser session: its game, and the folder holding its saves and exports.

    `previous_game` is the game a restart, a character switch or a load replaced, kept (with its
    clips) so that one step back is possible; the next replacement discards it.
    """

    session: Session
    player_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_elapsed_s: float | None = None
    previous_game: Session | None = None


class Screen(NamedTuple):
    """Every output that shows the game, in the order of the layout's `screen` components."""

    summary: dict[str, Any]
    chat: list[dict[str, Any]]
    clip: str | None
    gallery: list[tuple[str, str]]
    gauges: str
    history: pd.DataFrame
    status: str


@dataclass(frozen=True)
class Update:
    """The result of an action: the new player state, the screen, and (when the action sets
    one) the instruction to offer next: the one played, undone or last played in a game that
    returns, or the character's default."""

    player: Player
    screen: Screen
    instruction: Instruction | None = None
    toast: str | None = None

    @property
    def fields(self) -> tuple[str, ...] | None:
        """The instruction's five fields in `INSTRUCTION_FIELDS` order (as the API returns)."""
        return None if self.instruction is None else instruction_values(self.instruction)


@dataclass(frozen=True)
class Sent:
    """A command read and about to be played: what the player typed, the instruction it asks
    for, and the story with the pending bubble."""

    text: str
    instruction: Instruction
    chat: list[dict[str, Any]]

    @property
    def fields(self) -> tuple[str, ...]:
        return instruction_values(self.instruction)


def instruction_values(instruction: Instruction) -> tuple[str, ...]:
    return tuple(instruction.fields().values())


SERVER_PATH = re.compile(r"(?<![\w.~])(?:/[^\s/'\"`:;,()<>]+)+/([^\s/'\"`:;,()<>]*)")
"""An absolute path (at least two parts); its last part is what a message may show."""


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part: a player never learns where the
    server keeps its files ("/srv/app/characters/qiqi/weights" reads "weights")."""
    return SERVER_PATH.sub(r"\1", text)


def user_error(message: str, title: str) -> gr.Error:
    """A message for the player, led by its title; server paths cut to their last part
    (`without_paths`); `<`, `>` and `&` escaped because Gradio renders error toasts as HTML
    (quotes need no escaping in text, and API clients read the message as it is). Gradio's
    toast header shows the kind ("Error") whatever the title, so the title also opens the
    message, where the player and API clients both read it."""
    text = html.escape(without_paths(f"{title}: {message}"), quote=False)
    return gr.Error(text, title=title, print_exception=False)


NOT_UPLOADED = (
    "This file was not uploaded to this server: send the saved game itself, e.g. "
    "client.predict(handle_file('game.zip'), api_name='/load')."
)


def uploaded_path(path: str | None, uploads: Container[str]) -> str:
    """`path` when it names a file a client uploaded to this server (`uploads`: Gradio's record
    of the paths it stored uploads at), else a titled refusal: a player loads only what was
    uploaded, never a file the server wrote (another player's save) named by its path."""
    if not path:
        raise user_error("Choose a saved game (.zip) to load.", "Nothing to load")
    if path not in uploads or not Path(path).is_file():
        raise user_error(NOT_UPLOADED, "Cannot load this saved game")
    return path


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
MIN_FREE_BYTES = 1 << 20
"""A failed write on a disk with less free space than this was a full disk's doing."""


def is_disk_full(error: BaseException, folder: Path | None = None) -> bool:
    """Whether `error` (or an error that led to it) is a full disk. A writer in a subprocess
    (ffmpeg) reports a full disk as a broken pipe, so an `OSError` while `folder`'s disk has no
    room left counts too."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    if folder is None or not isinstance(error, OSError):
        return False
    try:
        return shutil.disk_usage(folder).free < MIN_FREE_BYTES
    except OSError:
        return False


DISK_FULL = "The server's disk is full, so nothing could be written."


@dataclass(frozen=True)
class DiskBudget:
    """The bytes the games' files may take: one player's (the clips of their game and of the
    game they may go back to, and each game's one save and one export), and everyone's."""

    player_bytes: int
    total_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> DiskBudget:
        return cls(settings.player_disk_mb << 20, settings.disk_mb << 20)


def megabytes(size: int) -> str:
    return f"{size / (1 << 20):.0f} MB"


def game_digest(session: Session) -> str:
    """Eight hex digits that change whenever the game does (each turn played writes a clip of
    its own name): the name of its one current save or export, which an unchanged game reuses."""
    digest = hashlib.blake2b(session.session_id.encode(), digest_size=4)
    for turn in session.turns:
        digest.update(f"{turn.index}:{turn.seed}:{turn.clip_path}\n".encode())
    return digest.hexdigest()


def gpu_seconds(steps: int) -> int:
    """ZeroGPU time to reserve for one turn of `steps` diffusion steps."""
    return int(min(GPU_MAX_SECONDS, GPU_BASE_SECONDS + GPU_SECONDS_PER_STEP * steps))


@contextmanager
def turn_errors(folder: Path | None = None) -> Iterator[None]:
    """Turn failures into `gr.Error`s inside the GPU function, so that the message survives
    ZeroGPU's worker process (which reduces any other exception to a generic one). `folder` is
    where the turn writes its clip (to tell a full disk)."""
    try:
        yield
    except gr.Error:
        raise
    except InstructionError as error:
        raise user_error(str(error), "Invalid instruction") from error
    except (torch.OutOfMemoryError, MemoryError) as error:
        raise user_error(
            "The GPU ran out of memory during this turn. Your game is unchanged; please try "
            "again in a moment.",
            "Out of memory",
        ) from error
    except TimeoutError as error:
        raise user_error(
            "The turn ran out of time. Your game is unchanged; please try again.", "Time-out"
        ) from error
    except EngineError as error:
        raise user_error(
            f"The models could not play this turn ({error}). Your game is unchanged.",
            "Turn failed",
        ) from error
    except Exception as error:
        if is_disk_full(error, folder):
            raise user_error(f"{DISK_FULL} Your game is unchanged.", "Disk full") from error
        logger.exception("turn failed")
        raise user_error(
            f"Something went wrong while playing this turn ({type(error).__name__}). Your game "
            "is unchanged; please try again.",
            "Turn failed",
        ) from error


def make_turn_runner(engine: Engine) -> TurnRunner:
    """The one GPU function: plays a turn and returns the new session (CPU data only).

    On ZeroGPU `spaces.GPU` reserves `gpu_seconds` for the engine's step count per call;
    elsewhere it is inert and this runs in the calling thread.
    """

    def duration(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> int:
        return gpu_seconds(engine.num_inference_steps)

    def run_turn(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session:
        def report(fraction: float, description: str) -> None:
            if progress is not None:
                progress(fraction, desc=description)

        previews: dict[str, Any] = {} if on_preview is None else {"on_preview": on_preview}
        with turn_errors(engine.clips.root):
            return engine.play(session, instruction, seed=seed, progress=report, **previews)

    on_gpu = spaces.GPU(duration=duration)(run_turn)

    def run_where_it_plays(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session:
        """A character that plays on the CPU takes no ZeroGPU reservation: it would only
        spend the visitor's quota."""
        on_cpu = engine.casting(session.character).on_cpu
        return (run_turn if on_cpu else on_gpu)(session, instruction, seed, progress, on_preview)

    return run_where_it_plays


@dataclass(frozen=True)
class StoryProgress:
    """A `Progress` reporting the turn's stage in the game's words, with the time left."""

    report: Progress
    eta_s: float | None

    def __call__(self, progress: float, desc: str | None = None) -> Any:
        return self.report(progress, desc=progress_text(desc, progress, self.eta_s))


def story_progress(progress: Progress | None, eta_s: float | None) -> Progress | None:
    return None if progress is None else StoryProgress(progress, eta_s)


class GameSlot:
    """What one browser session's `gr.State` holds: its current `Player`, and the lock that plays
    that game's actions one at a time.

    Gradio hands every event of a session the same state object, so an undo that arrives while a
    turn is running waits for the turn and then undoes it, instead of racing it (last writer
    wins, clips deleted under a turn about to land). The slot holds no engine and no model: Gradio
    copies what its components hold on every page load.
    """

    def __init__(self, root: str | Path, player: Player | None = None) -> None:
        self.root = Path(root)
        self.player = player
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> GameSlot:
        """A slot of its own with the same (immutable) player: what Gradio makes of the initial
        value for each new browser session."""
        return GameSlot(self.root, self.player)

    @contextmanager
    def _turn(self, wait_s: float) -> Iterator[None]:
        if not self._lock.acquire(timeout=wait_s):
            raise user_error(
                "This game is still busy with an earlier action; please try again in a moment.",
                "Busy",
            )
        try:
            yield
        finally:
            self._lock.release()

    def run(
        self, action: Callable[[Player | None], Update], wait_s: float = ACTION_WAIT_S
    ) -> Update:
        """Run `action` on the current player once the game's previous action has finished, and
        keep the player it returns. An action that raises leaves the player as it was."""
        with self._turn(wait_s):
            update = action(self.player)
            self.player = update.player
            return update

    def read(self, action: Callable[[Player | None], Any], wait_s: float = ACTION_WAIT_S) -> Any:
        """Run `action` (save, export) on the player between the game's other actions."""
        with self._turn(wait_s):
            return action(self.player)


def discard_game_files(slot: GameSlot | None) -> None:
    """Delete an ended browser session's files: Gradio's delete callback of the game state.

    A plain function on purpose: Gradio deep-copies its components' settings on every page load,
    and a bound method would drag the UI, the engine and the models into that copy.
    """
    if slot is None or slot.player is None:
        return
    player = slot.player
    ClipStore(slot.root).end_player(player.player_id, (player.session, player.previous_game))


class GameUI:
    """The actions of the game screen, bound to one engine and one character registry."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        window: int = 1,
        run_turn: TurnRunner | None = None,
        clock: Callable[[], float] = time.perf_counter,
        delete_grace_s: float = DELETE_GRACE_S,
        disk: DiskBudget | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.window = window
        self.files = engine.clips
        self.root = self.files.root
        self.delete_grace_s = delete_grace_s
        self.run_turn = run_turn or make_turn_runner(engine)
        self.clock = clock
        self.disk = disk or DiskBudget.of(Settings())
        self._next_sweep = 0.0

    @property
    def default_character(self) -> Character:
        """The first character that can be played here (the engine says which can)."""
        return next(
            (c for c in self.registry.characters if self.engine.casting(c.name).available),
            self.registry.characters[0],
        )

    def character(self, name: str) -> Character:
        if len(name) > MAX_NAME_CHARS:
            raise user_error(
                f"There is no character with such a long name ({len(name)} characters).",
                "Unknown character",
            )
        try:
            return self.registry.get(name)
        except RegistryError as error:
            raise user_error(str(error), "Unknown character") from error

    def character_choices(self) -> list[tuple[str, str]]:
        """The picker's `(label, name)` pairs: every character of the registry, those that
        cannot be played here labelled with the reason."""
        choices = []
        for character in self.registry.characters:
            casting = self.engine.casting(character.name)
            label = character.display_name
            if not casting.available:
                reason = shorten(without_paths(casting.unavailable), PICKER_REASON_CHARS)
                label += f" (unavailable: {reason})"
            choices.append((label, character.name))
        return choices

    def new_player(self, character: str | None = None) -> Player:
        name = character or self.default_character.name
        return Player(session=new_session(name, self.window))

    def workdir(self, player: Player, kind: str) -> Path:
        return self.files.workdir(player.player_id, player.session.session_id, kind)

    def default_instruction(self, name: str) -> Instruction:
        """The character's default instruction, in words the world knows."""
        return self.command_context(new_session(self.character(name).name)).fallback

    def last_instruction(self, session: Session) -> Instruction:
        """The instruction of the game's last turn, or the character's default."""
        if session.turns:
            return session.turns[-1].instruction
        return self.default_instruction(session.character)

    def short_name(self, name: str) -> str:
        """How the story calls the character: the name its instructions use ("Qiqi")."""
        return self.character(name).defaults.character

    def vocabulary(self, name: str) -> dict[str, list[str]]:
        """The suggestion chips for the character `name` on this engine."""
        character = self.character(name)
        return vocabulary_for(character, self.engine)

    def command_context(self, session: Session) -> InstructionContext:
        """What reading a command needs of the game: what it may leave out (the character's
        default adverb, and the time and place of the last turn), who may be named, and the
        world's closed vocabulary where it has one."""
        last = session.turns[-1].instruction if session.turns else None
        return game_context(
            self.registry, session.character, last,
            self.engine.vocabulary_for(session.character),
        )

    def read(
        self, session: Session, text: str | None, fields: Mapping[str, str | None] | None = None
    ) -> Instruction:
        """The instruction `text` asks for or, without text, the five `fields`, held to the game
        (`animegamer.command.parser`); `gr.Error` saying what is wrong. Changes no game."""
        context = self.command_context(session)
        try:
            if fields is None or (text and text.strip()):
                return read_instruction(text, context)
            return check_instruction(make_instruction(fields), context)
        except OtherCharacterError as error:
            playing = self.character(error.playing).display_name
            named = self.character(error.named).display_name
            raise user_error(
                f"This game plays {playing}. To play {named}, choose them in the character list "
                "(that starts a new game).",
                "Another character",
            ) from error
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error

    def default_command(self, session: Session) -> str:
        return format_command(self.command_context(session).fallback)

    def with_word(self, session: Session, text: str | None, field: str, word: str) -> str:
        """The command line after tapping the suggestion `word` for `field`."""
        try:
            return with_word(text, field, word, self.command_context(session))
        except InstructionError as error:
            raise user_error(str(error), "Invalid suggestion") from error

    def screen(self, player: Player, message: str) -> Screen:
        session = player.session
        status = f"**{html.escape(message)}**"
        if player.last_elapsed_s is not None:
            status += f"  \nLast turn took {player.last_elapsed_s:.1f} s."
        return Screen(
            summary=views.game_summary(session, self.engine.casting(session.character).kind),
            chat=views.chat_messages(session, self.short_name(session.character)),
            clip=views.newest_clip(session),
            gallery=views.gallery_items(session),
            gauges=views.gauges_html(session),
            history=views.history_frame(session),
            status=status,
        )

    def start(self, player: Player | None) -> Update:
        """The screen for a player arriving (a fresh game when they have none yet)."""
        player = player or self.new_player()
        shown = self.character(player.session.character).display_name
        return Update(player, self.screen(player, f"Playing {shown}."))

    def tidy(self) -> None:
        """Delete discarded files that are due, and (hourly) folders nobody will come back to."""
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_INTERVAL_S
        self.files.tidy(SESSION_FILES_MAX_AGE_S if sweep else None)

    # Actions -----------------------------------------------------------------------------

    def send(self, player: Player | None, text: str | None) -> Sent:
        """Read the command line before a turn: the fields to play, the command as it will be
        played (gaps filled), and the story with a pending bubble. Changes no game."""
        player = player or self.new_player()
        session = player.session
        instruction = self.read(session, text)
        try:
            check_room_for_turn(session)
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error
        eta = eta_seconds([turn.timings.total_s for turn in session.turns])
        chat = views.pending_messages(
            session, self.short_name(session.character), instruction, eta
        )
        return Sent(text or "", instruction, chat)

    def play(
        self,
        player: Player | None,
        fields: Mapping[str, str | None],
        text: str | None = "",
        seed: str | float | None = "random",
        progress: Progress | None = None,
    ) -> Update:
        """Play one turn from the free text when it is filled in, else from the five fields
        (the API's form of a turn)."""
        player = player or self.new_player()
        instruction = self.read(player.session, text, fields)
        return self.play_instruction(player, instruction, seed, progress)

    def play_instruction(
        self,
        player: Player | None,
        instruction: Instruction,
        seed: str | float | None = "random",
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Update:
        """Play one turn of `instruction` (already read); `on_preview` sees the clip forming."""
        player = player or self.new_player()
        try:
            check_room_for_turn(player.session)
            seed_value = parse_seed(seed)
        except SeedError as error:
            raise user_error(str(error), "Invalid seed") from error
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error
        self.tidy()
        self.make_room(player, "no turn was played")
        started = self.clock()
        eta = eta_seconds([turn.timings.total_s for turn in player.session.turns])
        try:
            session = self.run_turn(
                player.session, instruction, seed_value, story_progress(progress, eta),
                on_preview,
            )
        except gr.Error:
            raise
        except Exception as error:  # raised outside the GPU function (e.g. by ZeroGPU itself)
            logger.exception("turn failed outside the engine")
            raise user_error(
                f"The turn could not run ({type(error).__name__}). Your game is unchanged; "
                "please try again.",
                "Turn failed",
            ) from error
        elapsed = self.clock() - started
        release_free_memory()
        player = dataclasses.replace(player, session=session, last_elapsed_s=elapsed)
        turn = session.turns[-1]
        self.keep_within_budget(
            player, "this turn was not kept",
            lambda: self.files.discard_clip(turn.clip_path or "", grace_s=0),
        )
        noise = self.engine.casting(session.character).states_are_noise
        message = " ".join(filter(None, [f"Turn {turn.index} played (seed {turn.seed}).",
                                         "" if noise else turn_note(turn)]))
        return Update(player, self.screen(player, message), instruction)

    def undo(self, player: Player | None) -> Update:
        player = player or self.new_player()
        self.tidy()
        try:
            session = undo(player.session)
        except InstructionError as error:
            raise user_error(str(error), "Nothing to undo") from error
        removed = player.session.turns[-1]
        if removed.clip_path:
            self.files.discard_clip(removed.clip_path, self.delete_grace_s)
        player = dataclasses.replace(player, session=session)
        return Update(
            player, self.screen(player, f"Turn {removed.index} undone."), removed.instruction
        )

    def restart(self, player: Player | None) -> Update:
        player = player or self.new_player()
        self.tidy()
        name = player.session.character
        replaced = player.session
        player = self._replace_game(player, new_session(name, player.session.window))
        message = f"New game with {self.character(name).display_name}."
        return Update(
            player, self.screen(player, message), self.default_instruction(name),
            replaced_toast(replaced, message),
        )

    def choose_character(self, player: Player | None, name: str | None) -> Update:
        """Pick the character to play: a new game with them (the current one is closed)."""
        player = player or self.new_player()
        self.tidy()
        character = self.character(name or "")
        casting = self.engine.casting(character.name)
        if not casting.available:
            raise user_error(
                f"{character.display_name} cannot be played here: {casting.unavailable}",
                "Character unavailable",
            )
        replaced = player.session
        if character.name == replaced.character and not replaced.turns:
            # Already a fresh game with them (the picker may report a choice twice): no news.
            message = f"Playing {character.display_name}."
            return Update(player, self.screen(player, message), self.last_instruction(replaced))
        player = self._replace_game(player, new_session(character.name, self.window))
        message = f"New game with {character.display_name}."
        return Update(
            player, self.screen(player, message), self.default_instruction(character.name),
            replaced_toast(replaced, message),
        )

    def previous_game(self, player: Player | None) -> Update:
        """One step back after a restart, a character switch or a load: the replaced game
        returns, and the game it replaces becomes the one to go back to (unless it is empty)."""
        player = player or self.new_player()
        back = player.previous_game
        if back is None:
            raise user_error("There is no earlier game to go back to.", "No earlier game")
        current = player.session
        player = dataclasses.replace(
            player, session=back, previous_game=current if current.turns else None,
            last_elapsed_s=None,
        )
        name = self.character(back.character).display_name
        message = f"Back to your game with {name}: {turns_text(len(back.turns))}."
        return Update(player, self.screen(player, message), self.last_instruction(back), message)

    def parse(self, player: Player | None, text: str | None) -> tuple[str, ...]:
        """The five fields a text asks for in the player's game, as `play` would play them."""
        player = player or self.new_player()
        return tuple(self.read(player.session, text).fields().values())

    def save(self, player: Player | None) -> str:
        """Write the game to a zip file and return its path (for a download): the game's one
        current save, which replaces the one before."""
        player = player or self.new_player()
        session = player.session
        if not session.turns:
            raise user_error("Play a turn first: there is nothing to save yet.", "Nothing to save")
        self.make_room(player, "the game was not saved")
        name = f"animegamer-{session.character}-{len(session.turns)}turns-{game_digest(session)}"
        try:
            path = self.files.keep_one(
                self.workdir(player, "saves"), f"{name}.zip", lambda to: save_game(session, to)
            )
        except OSError as error:
            if is_disk_full(error):
                raise user_error(f"{DISK_FULL} The game was not saved.", "Disk full") from error
            raise
        self.keep_within_budget(player, "the game was not saved", player_downloads=path)
        return str(path)

    def turn_check(self) -> TurnCheck:
        """What a loaded game's every turn is held to: what a command typed in that game is
        (its character's names, its world's words)."""
        contexts: dict[str, InstructionContext] = {}

        def check(character: str, instruction: Instruction) -> None:
            if character not in contexts:
                contexts[character] = game_context(
                    self.registry, character, None, self.engine.vocabulary_for(character)
                )
            check_instruction(instruction, contexts[character])

        return check

    def load(self, player: Player | None, path: str | None) -> Update:
        """Continue a saved game (an uploaded zip, `uploaded_path`) in place of the current
        one."""
        player = player or self.new_player()
        if not path:
            raise user_error("Choose a saved game (.zip) to load.", "Nothing to load")
        self.tidy()
        self.make_room(player, "the saved game was not loaded")
        session_id = uuid.uuid4().hex
        clip_dir = self.files.game_folder(session_id)
        try:
            loaded = load_game(
                path, clip_dir, set(self.registry.names), self.engine.representation_dim,
                self.turn_check(),
            )
        except SaveFileError as error:
            raise user_error(str(error), "Cannot load this saved game") from error
        finally:
            self.files.forget_if_empty(clip_dir)
        self.files.note_written(clip_dir)
        session = dataclasses.replace(loaded, session_id=session_id)
        replaced = player.session
        player = self._replace_game(player, session)
        message = f"Saved game loaded: {turns_text(len(session.turns))}."
        return Update(
            player, self.screen(player, message), self.last_instruction(session),
            replaced_toast(replaced, message),
        )

    def playthrough(self, player: Player | None) -> str:
        """All clips of the game as one mp4; returns its path (for a download)."""
        player = player or self.new_player()
        session = player.session
        if not session.turns:
            raise user_error("Play a turn first: there is no clip yet.", "Nothing to download")
        self.make_room(player, "no playthrough was made")
        name = f"animegamer-{session.character}-{len(session.turns)}turns-{game_digest(session)}"
        clips = [turn.clip_path for turn in session.turns]
        try:
            path = self.files.keep_one(
                self.workdir(player, "exports"), f"{name}.mp4", lambda to: concat_mp4(clips, to)
            )
        except PlaythroughError as error:
            raise user_error(str(error), "Cannot build the playthrough") from error
        except OSError as error:
            if is_disk_full(error):
                raise user_error(f"{DISK_FULL} No playthrough was made.", "Disk full") from error
            raise
        self.keep_within_budget(player, "no playthrough was made", player_downloads=path)
        return str(path)

    def abandon(self, update: Update) -> None:
        """A turn played for an event that went away before showing it (a closed tab, a
        cancelled turn): its clip goes now, and the game stays as it was (the caller keeps the
        old player)."""
        clip = update.player.session.turns[-1].clip_path
        if clip:
            self.files.discard_clip(clip, grace_s=0)

    # Helpers -----------------------------------------------------------------------------

    def make_room(self, player: Player, what: str) -> None:
        """Before a write: the server's files within the global budget, other players' saves
        and exports removed (idlest games first) if need be, else a refusal saying `what`."""
        limit = self.disk.total_bytes
        if self.files.total_bytes() < limit:
            return
        self.files.empty_trash(everything=True)
        self.files.evict_downloads(limit, spare_player=player.player_id)
        if self.files.total_bytes() >= limit:
            raise user_error(
                f"The server's space for games ({megabytes(limit)}) is used up, so {what}. "
                "Your game is unchanged; please try again later.",
                "Server storage full",
            )

    def keep_within_budget(
        self,
        player: Player,
        what: str,
        take_back: Callable[[], None] | None = None,
        player_downloads: Path | None = None,
    ) -> None:
        """After a write: the player's files within their budget, their other saves and exports
        (but `player_downloads`, the one just written) removed if need be; else the write is
        taken back (`take_back`, or the file removed) and the player told, with `what`."""
        sessions = (player.session, player.previous_game)
        limit = self.disk.player_bytes
        if self.files.player_bytes(player.player_id, sessions) <= limit:
            return
        self.files.drop_downloads(player.player_id, keep=player_downloads)
        used = self.files.player_bytes(player.player_id, sessions)
        if used <= limit:
            return
        if take_back is not None:
            take_back()
        else:
            self.files.drop_downloads(player.player_id)
        raise user_error(
            f"Your games' files would take {megabytes(used)} on this server, over the "
            f"{megabytes(limit)} one player may use, so {what}; your game is unchanged. "
            "A new game frees the files of the game before this one.",
            "Your storage is full",
        )

    def _replace_game(self, player: Player, session: Session) -> Player:
        """The player with `session` as their game. The old game becomes the one to go back to
        (an empty one does not replace an earlier game with turns); the game that drops out
        loses its files after the grace period (its last screen may still be on its way to the
        browser)."""
        old = player.session
        keep, drop = (old, player.previous_game) if old.turns else (player.previous_game, old)
        if drop is not None:
            self.files.end_game(player.player_id, drop, self.delete_grace_s)
        return dataclasses.replace(
            player, session=session, last_elapsed_s=None, previous_game=keep
        )



def turns_text(count: int) -> str:
    return f"{count} turn" if count == 1 else f"{count} turns"


def replaced_toast(replaced: Session, message: str) -> str:
    """The one notice of a restart, a switch or a load: what happened and, when the game it
    replaced had turns, that this game is kept. An empty game is not kept, so its notice
    promises nothing (the way back, if any, still shows its own count on its button)."""
    if not replaced.turns:
        return message
    return (
        f"{message} Your previous game ({turns_text(len(replaced.turns))}) is kept: "
        "“Back to previous game” returns to it."
    )
