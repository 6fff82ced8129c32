"""What the screen shows for a session: pure functions of game data (no Gradio).

Each view shows the newest turns only (a fixed number), so a screen costs the same for a game of
five turns and one of a thousand.

Anything that came from a player (instruction text) is HTML-escaped here, once, before it
reaches a component that renders HTML (the chat and the notices); the gauges are built from
integers and fixed labels only.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from animegamer.command.parser import format_command
from animegamer.game.rules import GAUGE_MAX, Gauges, Instruction, Session, Turn
from animegamer.serving.engine import Casting
from animegamer.serving.settings import EngineKind
from animegamer.ui.story import motion_words, nudges, turn_sentence

GAUGE_LABELS = {"stamina": "Stamina", "social": "Social", "entertainment": "Entertainment"}
CHAT_TURNS = 20
GALLERY_CLIPS = 24
HISTORY_ROWS = 50
LOW_BAND = 30
HIGH_BAND = 70
HISTORY_COLUMNS = (
    "Turn",
    "Stamina",
    "Social",
    "Entertainment",
    "Stamina Δ",
    "Social Δ",
    "Entertainment Δ",
    "Motion level",
    "Instruction",
    "Seed",
    "Seconds",
)
"""The history table's columns: the gauges first, so that they show in the narrow side column
of a 1280-pixel screen; the instruction, the widest, after the numbers (the table scrolls)."""


def previous_gauges(session: Session, turn: Turn) -> Gauges:
    """The gauges just before `turn` was played."""
    return session.turns[turn.index - 2].gauges if turn.index > 1 else Gauges()


def applied_changes(session: Session, turn: Turn) -> dict[str, int]:
    """How much each gauge moved on `turn`: the change applied, after clamping and decay (not
    the raw prediction)."""
    before = previous_gauges(session, turn).as_dict()
    return {name: value - before[name] for name, value in turn.gauges.as_dict().items()}


def gauge_changes(session: Session) -> dict[str, int] | None:
    """How much each gauge moved on the last turn, or None before the first turn."""
    return applied_changes(session, session.turns[-1]) if session.turns else None


def signed(value: int) -> str:
    return f"+{value}" if value > 0 else ("±0" if value == 0 else f"−{-value}")


def band(value: int) -> str:
    if value < LOW_BAND:
        return "low"
    return "mid" if value < HIGH_BAND else "high"


def change_kind(delta: int) -> str:
    return "up" if delta > 0 else ("down" if delta < 0 else "flat")


def change_chips(changes: dict[str, int]) -> str:
    """One chip per gauge, `Stamina −5`, coloured by direction (integers and fixed labels).

    The story's HTML is sanitised in the browser, which drops `data-` attributes: classes name
    the gauge (`ag-g-stamina`) and the turn (`ag-turn-3`) instead."""
    return "".join(
        f'<span class="ag-change ag-{change_kind(delta)} ag-g-{name}">'
        f"{GAUGE_LABELS[name]} {signed(delta)}</span>"
        for name, delta in changes.items()
    )


def gauges_html(session: Session) -> str:
    """Three labelled 0–100 bars with colour bands and the last change."""
    changes = gauge_changes(session)
    rows = []
    for name, value in session.gauges.as_dict().items():
        percent = max(0, min(100, round(100 * value / GAUGE_MAX)))
        if changes is None:
            change = '<span class="ag-change ag-none" title="no turn yet">new</span>'
        else:
            delta = changes[name]
            change = f'<span class="ag-change ag-{change_kind(delta)}">{signed(delta)}</span>'
        rows.append(
            f'<div class="ag-gauge" data-gauge="{name}" data-value="{value}">'
            f'<div class="ag-gauge-head"><span class="ag-gauge-label">{GAUGE_LABELS[name]}</span>'
            f'<span class="ag-gauge-value">{value}'
            f'<small>/{GAUGE_MAX}</small></span>{change}</div>'
            f'<div class="ag-track" role="meter" aria-label="{GAUGE_LABELS[name]}" '
            f'aria-valuemin="0" aria-valuemax="{GAUGE_MAX}" aria-valuenow="{value}">'
            f'<div class="ag-fill ag-{band(value)}" style="width:{percent}%"></div></div></div>'
        )
    return f'<div class="ag-gauges">{"".join(rows)}</div>'


def turn_story(session: Session, turn: Turn, name: str) -> str:
    """The game's answer to a turn as HTML: the sentence, the applied gauge changes as chips,
    the motion level in words, the turn's seed and time, and (on the newest turn) nudges for
    gauges that run low or high. Every word that came from a player is escaped."""
    sentence = html.escape(turn_sentence(name, turn.instruction, turn.states))
    newest = turn.index == len(session.turns)
    hints = "".join(
        f'<div class="ag-nudge">{html.escape(hint)}</div>'
        for hint in (nudges(name, turn.gauges) if newest else ())
    )
    return (
        f'<div class="ag-story ag-turn-{turn.index}"><div class="ag-sentence">{sentence}</div>'
        f'<div class="ag-chips">{change_chips(applied_changes(session, turn))}</div>'
        f'<div class="ag-meta">Turn {turn.index} · motion {motion_words(turn.motion_level)} · '
        f"seed {turn.seed} · {turn.timings.total_s:.1f} s</div>{hints}</div>"
    )


def clip_exists(turn: Turn) -> bool:
    """A turn's clip can be gone (Gradio's cache sweep after a day); it is then not shown."""
    return bool(turn.clip_path) and Path(turn.clip_path).is_file()


def recent_turns(session: Session, count: int) -> tuple[Turn, ...]:
    return session.turns[-count:]


def user_message(instruction: Instruction) -> dict[str, Any]:
    """The player's line in the story: the command as actually played (escaped)."""
    return {"role": "user", "content": html.escape(format_command(instruction))}


def chat_messages(session: Session, name: str | None = None) -> list[dict[str, Any]]:
    """The story of the last `CHAT_TURNS` turns: each command as played (escaped text), then
    the game's answer about the character `name` with its clip."""
    name = name or session.character
    messages: list[dict[str, Any]] = []
    hidden = len(session.turns) - CHAT_TURNS
    if hidden > 0:
        messages.append({
            "role": "assistant",
            "content": f"{hidden} earlier turns are not shown here; the playthrough download "
                       "has every clip.",
        })
    for turn in recent_turns(session, CHAT_TURNS):
        messages.append(user_message(turn.instruction))
        answer: list[Any] = [turn_story(session, turn, name)]
        if clip_exists(turn):
            answer.append({"path": turn.clip_path})
        messages.append({"role": "assistant", "content": answer})
    return messages


PENDING_TEXT = "Imagining the next moment…"


def pending_messages(
    session: Session, name: str, instruction: Instruction, eta_s: float | None
) -> list[dict[str, Any]]:
    """The story with the command just sent and a bubble saying the turn is on its way."""
    wait = f" (about {eta_s:.0f} s)" if eta_s is not None else ""
    bubble = (
        f'<div class="ag-pending">{PENDING_TEXT}{wait}'
        '<div class="ag-pending-bar"></div></div>'
    )
    return [
        *chat_messages(session, name),
        user_message(instruction),
        {"role": "assistant", "content": bubble},
    ]


def refused_messages(
    session: Session, name: str, text: str, reason_html: str
) -> list[dict[str, Any]]:
    """The story with a refused command (`text`, as typed; escaped here) and why it was not
    played. `reason_html` is the refusal's message as `animegamer.ui.messages.user_error` made
    it: escaped already, since Gradio shows the same text as HTML in its notice."""
    typed = [{"role": "user", "content": html.escape(text)}] if text.strip() else []
    note = f'<div class="ag-refusal">Not played. {reason_html}</div>'
    return [*chat_messages(session, name), *typed, {"role": "assistant", "content": note}]


def gallery_items(session: Session) -> list[tuple[str, str]]:
    """The clips of the last `GALLERY_CLIPS` turns, oldest first, captioned with their turn
    and instruction."""
    return [
        (turn.clip_path, f"Turn {turn.index}: {turn.instruction.adverb} {turn.instruction.motion}"
                         f" · {turn.instruction.time} {turn.instruction.place}")
        for turn in recent_turns(session, GALLERY_CLIPS)
        if clip_exists(turn)
    ]


def newest_clip(session: Session) -> str | None:
    return session.turns[-1].clip_path if session.turns and clip_exists(session.turns[-1]) else None


def history_frame(session: Session) -> pd.DataFrame:
    """The last `HISTORY_ROWS` turns as rows of plain values, for a table component; the Δ
    columns hold the change applied to each gauge."""
    rows: list[Sequence[Any]] = []
    for turn in recent_turns(session, HISTORY_ROWS):
        changes = applied_changes(session, turn)
        rows.append((
            turn.index,
            turn.gauges.stamina,
            turn.gauges.social,
            turn.gauges.entertainment,
            changes["stamina"],
            changes["social"],
            changes["entertainment"],
            turn.motion_level,
            turn.instruction.text,
            str(turn.seed),
            round(turn.timings.total_s, 1),
        ))
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


STAND_INS = {
    EngineKind.PREVIEW: "the preview engine, tiny untrained models on the CPU, so the clips are "
    "noise",
    EngineKind.NANO: "the Nano world, a small anime world trained on a CPU",
}
"""What a stand-in engine is, as the banner's headline names it."""
ORIGINS = {"trained": "trained here", "converted": "the release's weights, converted"}
"""Where a character's own weights come from (`Casting.origin`), in the headline's words."""


def headline(casting: Casting) -> str:
    """What plays the character, in one line: `Spearman: trained here, CPU` for its own
    weights; for a stand-in, which one and why (`Qiqi: played by the Nano world, … (its
    weights need a GPU)`)."""
    if casting.kind in STAND_INS:
        why = f" ({casting.note})" if casting.note else ""
        return f"{casting.character}: played by {STAND_INS[casting.kind]}{why}"
    return f"{casting.character}: {ORIGINS.get(casting.origin, casting.origin)}, {casting.device}"


def banner_html(casting: Casting, notice: str) -> str:
    """The headline of what plays the chosen character, the engine's notice (which weights
    play whom) folded under it; nothing for its own weights when there is nothing to say."""
    if casting.kind == EngineKind.REAL and not notice:
        return ""
    details = f"<p>{html.escape(notice)}</p>" if notice else ""
    return (
        f'<details class="ag-banner" data-kind="{html.escape(casting.kind.value)}"><summary>'
        f"{html.escape(headline(casting))}</summary>{details}</details>"
    )


def game_summary(session: Session, engine_kind: str) -> dict[str, Any]:
    """The game as plain data, for API clients (the `summary` output of every action)."""
    last = session.turns[-1] if session.turns else None
    return {
        "character": session.character,
        "turns": len(session.turns),
        "gauges": session.gauges.as_dict(),
        "engine": engine_kind,
        "last_turn": None
        if last is None
        else {
            "index": last.index,
            "instruction": last.instruction.fields(),
            "text": last.instruction.text,
            "states": {
                "ml": last.states.ml, "sc": last.states.sc,
                "et": last.states.et, "st": last.states.st,
            },
            "motion_level": last.motion_level,
            "gauge_changes": gauge_changes(session),
            "seed": last.seed,
            "seconds": round(last.timings.total_s, 3),
        },
    }



def preview_html(frames: np.ndarray, step: int, num_steps: int) -> str:
    """The clip as it forms after `step` of `num_steps` denoising steps, for the stage:
    `frames` (uint8 [n, h, w, 3]) side by side as inline PNGs, scaled up by the browser. Inline,
    so no file is written or fetched and the picture changes in place."""
    images = []
    for frame in frames:
        buffer = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8)).save(buffer, format="PNG")
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        images.append(f'<img alt="" src="data:image/png;base64,{data}">')
    return (
        '<div class="ag-preview" role="img" aria-label="The clip as it forms">'
        f'{"".join(images)}<span class="ag-preview-label">Forming… step {step} of {num_steps}'
        "</span></div>"
    )
