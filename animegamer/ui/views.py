"""What the screen shows for a session: pure functions of game data (no Gradio).

Each view shows the newest turns only (a fixed number), so a screen costs the same for a game of
five turns and one of a thousand.

Anything that came from a player (instruction text) is HTML-escaped here, once, before it
reaches a component that renders HTML (the chat and the notices); the gauges are built from
integers and fixed labels only.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from animegamer.game import GAUGE_MAX, Gauges, Session, Turn

GAUGE_LABELS = {"stamina": "Stamina", "social": "Social", "entertainment": "Entertainment"}
CHAT_TURNS = 20
GALLERY_CLIPS = 24
HISTORY_ROWS = 50
LOW_BAND = 30
HIGH_BAND = 70
HISTORY_COLUMNS = (
    "Turn",
    "Instruction",
    "Motion level",
    "Stamina Δ",
    "Social Δ",
    "Entertainment Δ",
    "Stamina",
    "Social",
    "Entertainment",
    "Seed",
    "Seconds",
)


def previous_gauges(session: Session, turn: Turn) -> Gauges:
    """The gauges just before `turn` was played."""
    return session.turns[turn.index - 2].gauges if turn.index > 1 else Gauges()


def gauge_changes(session: Session) -> dict[str, int] | None:
    """How much each gauge moved on the last turn, or None before the first turn."""
    if not session.turns:
        return None
    last = session.turns[-1]
    before = previous_gauges(session, last).as_dict()
    return {name: value - before[name] for name, value in last.gauges.as_dict().items()}


def signed(value: int) -> str:
    return f"+{value}" if value > 0 else ("±0" if value == 0 else f"−{-value}")


def band(value: int) -> str:
    if value < LOW_BAND:
        return "low"
    return "mid" if value < HIGH_BAND else "high"


def gauges_html(session: Session) -> str:
    """Three labelled 0–100 bars with colour bands and the last change."""
    changes = gauge_changes(session)
    rows = []
    for name, value in session.gauges.as_dict().items():
        percent = max(0, min(100, round(100 * value / GAUGE_MAX)))
        if changes is None:
            change = '<span class="ag-change ag-none">no turn yet</span>'
        else:
            delta = changes[name]
            kind = "up" if delta > 0 else ("down" if delta < 0 else "flat")
            change = f'<span class="ag-change ag-{kind}">{signed(delta)}</span>'
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


def turn_summary(session: Session, turn: Turn) -> str:
    before = previous_gauges(session, turn).as_dict()
    parts = [
        f"{GAUGE_LABELS[name]} {value} ({signed(value - before[name])})"
        for name, value in turn.gauges.as_dict().items()
    ]
    return (
        f"Turn {turn.index} · motion level {turn.motion_level}<br>"
        f"{' · '.join(parts)}<br>seed {turn.seed} · {turn.timings.total_s:.1f} s"
    )


def clip_exists(turn: Turn) -> bool:
    """A turn's clip can be gone (Gradio's cache sweep after a day); it is then not shown."""
    return bool(turn.clip_path) and Path(turn.clip_path).is_file()


def recent_turns(session: Session, count: int) -> tuple[Turn, ...]:
    return session.turns[-count:]


def chat_messages(session: Session) -> list[dict[str, Any]]:
    """The chat of the last `CHAT_TURNS` turns: each instruction (escaped text), then the game's
    answer with its clip."""
    messages: list[dict[str, Any]] = []
    hidden = len(session.turns) - CHAT_TURNS
    if hidden > 0:
        messages.append({
            "role": "assistant",
            "content": f"{hidden} earlier turns are not shown here; the playthrough download "
                       "has every clip.",
        })
    for turn in recent_turns(session, CHAT_TURNS):
        messages.append({"role": "user", "content": html.escape(turn.instruction.text)})
        answer: list[Any] = [turn_summary(session, turn)]
        if clip_exists(turn):
            answer.append({"path": turn.clip_path})
        messages.append({"role": "assistant", "content": answer})
    return messages


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
    """The last `HISTORY_ROWS` turns as rows of plain values, for a table component."""
    rows: list[Sequence[Any]] = [
        (
            turn.index,
            turn.instruction.text,
            turn.motion_level,
            turn.states.st,
            turn.states.sc,
            turn.states.et,
            turn.gauges.stamina,
            turn.gauges.social,
            turn.gauges.entertainment,
            str(turn.seed),
            round(turn.timings.total_s, 1),
        )
        for turn in recent_turns(session, HISTORY_ROWS)
    ]
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


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
