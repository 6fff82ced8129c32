"""The UI's actions as plain functions of (player state, inputs) → (new state, outputs).

Nothing here needs a browser or a running server: `GameUI` takes the engine and the registry,
and every action returns an `Update` (the new `Player` and what the screen shows) or raises
`gr.Error` with a message for the player, in which case the caller keeps its old state — Gradio
does not store the state of an event that raised. Game state lives only in `Player` values, one
per browser session; the engine holds models, never games.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import gradio as gr
import pandas as pd
import spaces
import torch

from animegamer.characters import Character, Registry, RegistryError
from animegamer.devices import Placement
from animegamer.engine import EngineError
from animegamer.game import (
    INSTRUCTION_FIELDS,
    Instruction,
    InstructionError,
    Session,
    make_instruction,
    new_session,
    parse_instruction_text,
    undo,
)
from animegamer.playthrough import PlaythroughError, concat_mp4
from animegamer.savefile import SaveFileError, load_game, save_game
from animegamer.ui import views

logger = logging.getLogger(__name__)

MAX_SEED = 2**63 - 1
RANDOM_SEED_WORDS = frozenset({"", "random"})
_SEED = re.compile(r"^\d{1,19}$")
GPU_BASE_SECONDS = 20
GPU_SECONDS_PER_STEP = 1.0
GPU_MAX_SECONDS = 300
PLAYERS_FOLDER = "players"


class Progress(Protocol):
    """`gr.Progress`: called as `progress(fraction, desc=...)`."""

    def __call__(self, progress: float, desc: str | None = None) -> Any: ...


class TurnRunner(Protocol):
    def __call__(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None,
        steps: int,
        progress: Progress | None = None,
    ) -> Session: ...


class Engine(Protocol):
    """What the UI needs of `animegamer.engine.TurnEngine`."""

    kind: str
    notice: str
    num_inference_steps: int
    output_dir: Path
    placement: Placement
    representation_dim: int | None

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: Callable[[float, str], None] | None = None,
    ) -> Session: ...


@dataclass(frozen=True, eq=False)
class Player:
    """One browser session: its game, and the folder holding its saves and exports."""

    session: Session
    player_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_elapsed_s: float | None = None


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
    them) the five instruction fields in `INSTRUCTION_FIELDS` order."""

    player: Player
    screen: Screen
    fields: tuple[str, ...] | None = None


def user_error(message: str, title: str) -> gr.Error:
    """A message for the player; escaped because Gradio renders error toasts as HTML."""
    return gr.Error(html.escape(message), title=title, print_exception=False)


def parse_seed(text: str | float | None) -> int | None:
    """`None` (a fresh random seed) for "random" or an empty field, else an integer seed."""
    raw = "" if text is None else str(text).strip().lower()
    if raw in RANDOM_SEED_WORDS:
        return None
    if not _SEED.match(raw) or int(raw) > MAX_SEED:
        raise user_error(
            "The seed must be a whole number from 0 to 9223372036854775807, or 'random'.",
            "Invalid seed",
        )
    return int(raw)


def gpu_seconds(steps: int) -> int:
    """ZeroGPU time to reserve for one turn of `steps` diffusion steps."""
    return int(min(GPU_MAX_SECONDS, GPU_BASE_SECONDS + GPU_SECONDS_PER_STEP * steps))


@contextmanager
def turn_errors() -> Iterator[None]:
    """Turn failures into `gr.Error`s inside the GPU function, so that the message survives
    ZeroGPU's worker process (which reduces any other exception to a generic one)."""
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
        logger.exception("turn failed")
        raise user_error(
            f"Something went wrong while playing this turn ({type(error).__name__}). Your game "
            "is unchanged; please try again.",
            "Turn failed",
        ) from error


def make_turn_runner(engine: Engine) -> TurnRunner:
    """The one GPU function: plays a turn and returns the new session (CPU data only).

    On ZeroGPU `spaces.GPU` reserves `gpu_seconds(steps)` per call; elsewhere it is inert and
    this runs in the calling thread. `steps` is the number of diffusion steps of this turn, so the
    reservation follows it.
    """

    def duration(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        steps: int,
        progress: Progress | None = None,
    ) -> int:
        return gpu_seconds(steps)

    def run_turn(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        steps: int,
        progress: Progress | None = None,
    ) -> Session:
        def report(fraction: float, description: str) -> None:
            if progress is not None:
                progress(fraction, desc=description)

        with turn_errors():
            return engine.play(
                session, instruction, seed=seed, progress=report, num_inference_steps=steps
            )

    if engine.kind == "preview":
        return run_turn  # CPU only: a ZeroGPU reservation would only spend the visitor's quota
    return spaces.GPU(duration=duration)(run_turn)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


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
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.window = window
        self.root = Path(engine.output_dir)
        self.run_turn = run_turn or make_turn_runner(engine)
        self.clock = clock

    @property
    def default_character(self) -> Character:
        return self.registry.characters[0]

    def character(self, name: str) -> Character:
        try:
            return self.registry.get(name)
        except RegistryError as error:
            raise user_error(str(error), "Unknown character") from error

    def new_player(self, character: str | None = None) -> Player:
        name = character or self.default_character.name
        return Player(session=new_session(name, self.window))

    def workdir(self, player: Player, kind: str) -> Path:
        folder = self.root / PLAYERS_FOLDER / player.player_id / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def default_fields(self, name: str) -> tuple[str, ...]:
        defaults = self.character(name).defaults
        return tuple(getattr(defaults, key) for key in INSTRUCTION_FIELDS)

    def screen(self, player: Player, message: str) -> Screen:
        session = player.session
        status = f"**{html.escape(message)}**"
        if player.last_elapsed_s is not None:
            status += f"  \nLast turn took {player.last_elapsed_s:.1f} s."
        return Screen(
            summary=views.game_summary(session, self.engine.kind),
            chat=views.chat_messages(session),
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

    # Actions -----------------------------------------------------------------------------

    def play(
        self,
        player: Player | None,
        fields: Mapping[str, str | None],
        text: str | None = "",
        seed: str | float | None = "random",
        progress: Progress | None = None,
    ) -> Update:
        """Play one turn from the free text when it is filled in, else from the five fields."""
        player = player or self.new_player()
        try:
            instruction = (
                parse_instruction_text(text) if text and text.strip()
                else make_instruction(fields)
            )
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error
        self._check_character(player.session, instruction)
        seed_value = parse_seed(seed)
        started = self.clock()
        try:
            session = self.run_turn(
                player.session, instruction, seed_value, self.engine.num_inference_steps, progress
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
        player = dataclasses.replace(player, session=session, last_elapsed_s=elapsed)
        turn = session.turns[-1]
        message = f"Turn {turn.index} played (seed {turn.seed})."
        return Update(player, self.screen(player, message), tuple(instruction.fields().values()))

    def undo(self, player: Player | None) -> Update:
        player = player or self.new_player()
        try:
            session = undo(player.session)
        except InstructionError as error:
            raise user_error(str(error), "Nothing to undo") from error
        removed = player.session.turns[-1]
        self._delete_clip(removed.clip_path)
        player = dataclasses.replace(player, session=session)
        fields = tuple(removed.instruction.fields().values())
        return Update(player, self.screen(player, f"Turn {removed.index} undone."), fields)

    def restart(self, player: Player | None) -> Update:
        player = player or self.new_player()
        self._discard(player.session)
        name = player.session.character
        player = dataclasses.replace(
            player, session=new_session(name, player.session.window), last_elapsed_s=None
        )
        message = f"New game with {self.character(name).display_name}."
        return Update(player, self.screen(player, message), self.default_fields(name))

    def choose_character(self, player: Player | None, name: str | None) -> Update:
        """Pick the character to play: a new game with them (the current one is closed)."""
        player = player or self.new_player()
        character = self.character(name or "")
        if character.name == player.session.character and not player.session.turns:
            message = f"Playing {character.display_name}."
        else:
            self._discard(player.session)
            player = dataclasses.replace(
                player, session=new_session(character.name, self.window), last_elapsed_s=None
            )
            message = f"New game with {character.display_name}."
        return Update(player, self.screen(player, message), self.default_fields(character.name))

    def fill_from_text(self, text: str | None) -> tuple[str, ...]:
        """The five fields read from `Character: …; Motion: …; Background: …`."""
        try:
            instruction = parse_instruction_text(text or "")
        except InstructionError as error:
            raise user_error(str(error), "Could not read the instruction") from error
        return tuple(instruction.fields().values())

    def save(self, player: Player | None) -> str:
        """Write the game to a zip file and return its path (for a download)."""
        player = player or self.new_player()
        session = player.session
        if not session.turns:
            raise user_error("Play a turn first: there is nothing to save yet.", "Nothing to save")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"animegamer-{session.character}-{len(session.turns)}turns-{stamp}.zip"
        return str(save_game(session, self.workdir(player, "saves") / name))

    def load(self, player: Player | None, path: str | None) -> Update:
        """Continue a saved game (an uploaded zip) in place of the current one."""
        player = player or self.new_player()
        if not path:
            raise user_error("Choose a saved game (.zip) to load.", "Nothing to load")
        clip_dir = self.workdir(player, f"loaded-{uuid.uuid4().hex[:12]}")
        try:
            session = load_game(
                path, clip_dir, set(self.registry.names), self.engine.representation_dim
            )
        except SaveFileError as error:
            shutil.rmtree(clip_dir, ignore_errors=True)
            raise user_error(str(error), "Cannot load this saved game") from error
        self._discard(player.session)
        player = dataclasses.replace(player, session=session, last_elapsed_s=None)
        fields = (
            tuple(session.turns[-1].instruction.fields().values())
            if session.turns else self.default_fields(session.character)
        )
        message = f"Saved game loaded: {len(session.turns)} turns."
        return Update(player, self.screen(player, message), fields)

    def playthrough(self, player: Player | None) -> str:
        """All clips of the game as one mp4; returns its path (for a download)."""
        player = player or self.new_player()
        session = player.session
        if not session.turns:
            raise user_error("Play a turn first: there is no clip yet.", "Nothing to download")
        out = self.workdir(player, "exports") / (
            f"animegamer-{session.character}-{len(session.turns)}turns-"
            f"{uuid.uuid4().hex[:8]}.mp4"
        )
        try:
            return str(concat_mp4([turn.clip_path for turn in session.turns], out))
        except PlaythroughError as error:
            raise user_error(str(error), "Cannot build the playthrough") from error

    def cleanup(self, player: Player | None) -> None:
        """Delete a finished browser session's files (Gradio calls this when its state expires)."""
        if player is None:
            return
        self._discard(player.session)
        shutil.rmtree(self.root / PLAYERS_FOLDER / player.player_id, ignore_errors=True)

    def sweep(self, max_age_s: float) -> int:
        """Delete session folders untouched for `max_age_s` (left over by a crash or restart)."""
        removed = 0
        cutoff = time.time() - max_age_s
        for parent in (self.root, self.root / PLAYERS_FOLDER):
            if not parent.is_dir():
                continue
            for entry in parent.iterdir():
                stale = entry.is_dir() and entry.stat().st_mtime < cutoff
                if stale and entry.name != PLAYERS_FOLDER:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
        return removed

    # Helpers -----------------------------------------------------------------------------

    def _check_character(self, session: Session, instruction: Instruction) -> None:
        """Refuse an instruction that names another playable character: their models differ."""
        named = instruction.character.lower()
        for character in self.registry.characters:
            if named in {character.name.lower(), character.defaults.character.lower()}:
                if character.name != session.character:
                    playing = self.character(session.character).display_name
                    raise user_error(
                        f"This game plays {playing}. To play {character.display_name}, choose "
                        "them in the character list (that starts a new game).",
                        "Another character",
                    )
                return

    def _delete_clip(self, clip_path: str) -> None:
        path = Path(clip_path)
        if clip_path and _inside(path, self.root):
            path.unlink(missing_ok=True)

    def _discard(self, session: Session) -> None:
        """Delete the clip folders of a game that is over (the screen shows cached copies)."""
        folders = {Path(turn.clip_path).parent for turn in session.turns if turn.clip_path}
        folders.add(self.root / session.session_id)
        for folder in folders:
            if _inside(folder, self.root) and folder.resolve() != self.root.resolve():
                shutil.rmtree(folder, ignore_errors=True)
