"""The evaluation report: `metrics.json`, `report.md` (beside the paper's numbers),
`report.html` (frames per turn, per-metric plots across the turn index as inline SVG, and the
worst five turns per metric) and `grid.png` (the first turns' frames next to their
instructions, for a README); `compare` puts two reports side by side.

Everything that comes from a benchmark or a player (instructions, game ids, notes) goes through
`html.escape` before it reaches the page.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from animegamer.evaluate.backbones import TINY_CLIP
from animegamer.evaluate.benchmark import read_turns
from animegamer.evaluate.metrics import (
    JUDGE_METRICS,
    METRICS,
    PROBE_METRICS,
    SPECS,
    MetricSpec,
    paired_interval,
    summarise,
)
from animegamer.serving.settings import EngineKind

METRICS_FILE = "metrics.json"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
GRID_FILE = "grid.png"
GRID_TURNS = 12
GRID_TEXT_WIDTH = 300
WORST = 5
PLOT_WIDTH, PLOT_HEIGHT, PLOT_PAD = 320, 160, 30
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
    "text-align:left;vertical-align:top}img{display:block}.plots{display:flex;flex-wrap:wrap;"
    "gap:1em}.better{color:#080}.worse{color:#b00}"
)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _used_specs(records: Sequence[Mapping[str, Any]]) -> list[MetricSpec]:
    judged = any("judge_overall" in record for record in records)
    probed = any("probe_time" in record for record in records)
    return [*METRICS, *(JUDGE_METRICS if judged else ()), *(PROBE_METRICS if probed else ())]


def build_metrics(records: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> dict:
    """The content of `metrics.json`: run facts, per-metric summaries and definitions."""
    specs = _used_specs(records)
    summary = summarise(records, [spec.key for spec in specs])
    peak = [float(r["peak_memory_mb"]) for r in records if r.get("peak_memory_mb") is not None]
    summary["peak_memory_mb"]["max"] = max(peak) if peak else None
    missing = [f"{r['game']} turn {r['turn']}: {r['judge_missing']}"
               for r in records if r.get("judge_missing")]
    return {
        "meta": {**meta, "turns": len(records), "games": len({r["game"] for r in records})},
        "summary": summary,
        "definitions": {spec.key: spec.definition for spec in specs},
        "judge_missing": missing,
    }


def write_report(out: Path, records: Sequence[Mapping[str, Any]],
                 meta: Mapping[str, Any]) -> dict:
    """Write the three report files into `out`; returns the metrics."""
    metrics = build_metrics(records, meta)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    (out / MARKDOWN_FILE).write_text(markdown(metrics), encoding="utf-8")
    (out / HTML_FILE).write_text(html_page(metrics, records), encoding="utf-8")
    write_grid(out, records)
    return metrics


def write_grid(out: Path, records: Sequence[Mapping[str, Any]],
               turns: int = GRID_TURNS) -> Path | None:
    """`grid.png`: one row per turn (the first `turns`): its game, turn and instruction, then
    its sampled generated frames (first and last included). None when no turn has frames."""
    from PIL import Image, ImageDraw

    rows = [(r, out / r["generated_frames"]) for r in records[:turns]
            if r.get("generated_frames") and (out / r["generated_frames"]).is_file()]
    if not rows:
        return None
    strips = [Image.open(path).convert("RGB") for _, path in rows]
    height = max(strip.height for strip in strips)
    grid = Image.new("RGB", (GRID_TEXT_WIDTH + max(s.width for s in strips), height * len(rows)),
                     "white")
    draw = ImageDraw.Draw(grid)
    for index, ((record, _), strip) in enumerate(zip(rows, strips, strict=True)):
        top = index * height
        fields = record.get("instruction") or {}
        lines = [f"{record['game']} · turn {record['turn']}",
                 f"{fields.get('character', '')}: {fields.get('adverb', '')} "
                 f"{fields.get('motion', '')}",
                 f"{fields.get('time', '')} {fields.get('place', '')}"]
        draw.multiline_text((8, top + 8), "\n".join(lines), fill="black", spacing=6)
        grid.paste(strip, (GRID_TEXT_WIDTH, top))
    path = out / GRID_FILE
    grid.save(path)
    return path


def _interval(metrics: Mapping[str, Any], key: str) -> str:
    """The mean's 95 % interval as "[low, high]", or "–" (one game, or the peak memory)."""
    entry = metrics["summary"].get(key, {})
    bounds = entry.get("interval") if key != "peak_memory_mb" else None
    return f"[{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else "–"


def _with_interval(value: str, interval: str) -> str:
    return value if interval == "–" else f"{value} {interval}"


def _value(metrics: Mapping[str, Any], key: str) -> float | None:
    entry = metrics["summary"].get(key, {})
    return entry.get("max") if key == "peak_memory_mb" else entry.get("mean")


def _meta_lines(meta: Mapping[str, Any]) -> list[str]:
    return [f"{name}: {value}" for name, value in meta.items()]


def warnings(meta: Mapping[str, Any]) -> list[str]:
    """What makes the numbers of a run meaningless or not comparable with the paper's."""
    found = []
    if meta.get("engine") == EngineKind.PREVIEW:
        found.append("The preview engine plays tiny random models: these numbers test the "
                     "evaluation, not AnimeGamer.")
    if meta.get("clip") == TINY_CLIP:
        found.append("CLIP is a tiny random network (--clip tiny): the CLIP metrics mean nothing.")
    return found


def markdown(metrics: Mapping[str, Any]) -> str:
    """The report as Markdown: run facts, the table beside the paper, the definitions."""
    lines = ["# AnimeGamer evaluation", ""]
    lines += [f"**Warning**: {text}\n" for text in warnings(metrics["meta"])]
    lines += [f"- {line}" for line in _meta_lines(metrics["meta"])]
    lines += ["", "| group | metric | ours | 95 % interval | turns | AnimeGamer (paper) "
              "| GC (paper) |", "|---|---|---|---|---|---|---|"]
    for key in metrics["definitions"]:
        spec = SPECS[key]
        paper = spec.paper or (None, None)
        count = metrics["summary"][key]["count"]
        lines.append(f"| {spec.group} | {spec.label} | {_fmt(_value(metrics, key))} "
                     f"| {_interval(metrics, key)} | {count} "
                     f"| {_fmt(paper[0])} | {_fmt(paper[1])} |")
    lines += ["", "Peak memory is the maximum over turns. The interval is where the mean lies "
              "95 % of the time when whole games are resampled (a game's turns are not "
              "independent draws); `--compare` gives two runs' difference its own interval over "
              "the games both played. The paper's numbers are on its own "
              "benchmark (2,000 rounds, 20 characters); ours are on this benchmark.", "",
              "## Definitions", ""]
    lines += [f"- **{SPECS[k].label}**: {text}" for k, text in metrics["definitions"].items()]
    if metrics["judge_missing"]:
        lines += ["", "## Judge answers recorded as missing", ""]
        lines += [f"- {html.escape(line)}" for line in metrics["judge_missing"]]
    return "\n".join(lines) + "\n"


def svg_plot(points: Mapping[str, float], label: str) -> str:
    """A line plot of value by turn index, as inline SVG (axes, points, min/max labels)."""
    if not points:
        return ""
    xs = [int(x) for x in points]
    ys = list(points.values())
    low, high = min(ys), max(ys)
    span_y = (high - low) or 1.0
    span_x = (max(xs) - min(xs)) or 1

    def at(x: int, y: float) -> tuple[float, float]:
        return (PLOT_PAD + (x - min(xs)) / span_x * (PLOT_WIDTH - 2 * PLOT_PAD),
                PLOT_HEIGHT - PLOT_PAD - (y - low) / span_y * (PLOT_HEIGHT - 2 * PLOT_PAD))

    coords = [at(x, y) for x, y in zip(xs, ys, strict=True)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3"/>' for x, y in coords)
    bottom = PLOT_HEIGHT - PLOT_PAD
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
        f'role="img" aria-label="{html.escape(label)} by turn">'
        f'<text x="{PLOT_PAD}" y="14" font-size="12">{html.escape(label)} by turn</text>'
        f'<line x1="{PLOT_PAD}" y1="{bottom}" x2="{PLOT_WIDTH - PLOT_PAD}" y2="{bottom}" '
        f'stroke="#888"/><line x1="{PLOT_PAD}" y1="{PLOT_PAD}" x2="{PLOT_PAD}" y2="{bottom}" '
        f'stroke="#888"/>'
        f'<text x="2" y="{PLOT_PAD + 4}" font-size="10">{high:.3g}</text>'
        f'<text x="2" y="{bottom}" font-size="10">{low:.3g}</text>'
        f'<text x="{PLOT_PAD}" y="{PLOT_HEIGHT - 8}" font-size="10">turn {min(xs)}</text>'
        f'<text x="{PLOT_WIDTH - PLOT_PAD - 30}" y="{PLOT_HEIGHT - 8}" font-size="10">'
        f'turn {max(xs)}</text>'
        f'<polyline fill="none" stroke="#36c" stroke-width="2" points="{path}"/>'
        f'<g fill="#36c">{dots}</g></svg>'
    )


def worst_turns(records: Sequence[Mapping[str, Any]], key: str,
                count: int = WORST) -> list[Mapping[str, Any]]:
    """The `count` turns with the worst value of a metric (lowest, or highest for errors)."""
    scored = [r for r in records if r.get(key) is not None]
    return sorted(scored, key=lambda r: float(r[key]),
                  reverse=not SPECS[key].higher_is_better)[:count]


def _image(path: str | None, alt: str) -> str:
    if not path:
        return "<em>none</em>"
    return f'<img src="{html.escape(path, quote=True)}" alt="{html.escape(alt, quote=True)}">'


def html_page(metrics: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset=\"utf-8\">",
             "<title>AnimeGamer evaluation</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>AnimeGamer evaluation</h1>"]
    parts += [f"<p><strong>Warning</strong>: {esc(text)}</p>" for text in warnings(metrics["meta"])]
    parts.append("<ul>")
    parts += [f"<li>{esc(line)}</li>" for line in _meta_lines(metrics["meta"])]
    parts += ["</ul><h2>Metrics</h2><table><tr><th>group</th><th>metric</th><th>ours</th>"
              "<th>95 % interval</th><th>turns</th><th>AnimeGamer (paper)</th><th>GC (paper)</th>"
              "<th>definition</th></tr>"]
    keys = list(metrics["definitions"])
    for key in keys:
        spec = SPECS[key]
        paper = spec.paper or (None, None)
        parts.append(
            f"<tr><td>{esc(spec.group)}</td><td>{esc(spec.label)}</td>"
            f"<td>{_fmt(_value(metrics, key))}</td><td>{_interval(metrics, key)}</td>"
            f"<td>{metrics['summary'][key]['count']}</td>"
            f"<td>{_fmt(paper[0])}</td><td>{_fmt(paper[1])}</td>"
            f"<td>{esc(spec.definition)}</td></tr>"
        )
    parts.append("</table><h2>Across the game</h2><div class=\"plots\">")
    parts += [svg_plot(metrics["summary"][key]["by_turn"], SPECS[key].label) for key in keys]
    parts.append("</div><h2>Worst five turns per metric</h2>")
    for key in keys:
        worst = worst_turns(records, key)
        if not worst:
            continue
        parts.append(f"<h3>{esc(SPECS[key].label)}</h3><table><tr><th>game</th><th>turn</th>"
                     "<th>instruction</th><th>value</th><th>generated</th></tr>")
        parts += [
            f"<tr><td>{esc(str(r['game']))}</td><td>{r['turn']}</td><td>{esc(r['text'])}</td>"
            f"<td>{_fmt(float(r[key]))}</td><td>{_image(r['generated_frames'], 'generated')}"
            "</td></tr>"
            for r in worst
        ]
        parts.append("</table>")
    parts.append("<h2>Frames per turn</h2>")
    games: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        games.setdefault(str(record["game"]), []).append(record)
    for game, turns in games.items():
        parts.append(f"<h3>{esc(game)}</h3><table><tr><th>turn</th><th>instruction</th>"
                     "<th>generated</th><th>ground truth</th><th>levels (gen/target)</th></tr>")
        parts += [
            f"<tr><td>{r['turn']}</td><td>{esc(r['text'])}</td>"
            f"<td>{_image(r['generated_frames'], 'generated')}</td>"
            f"<td>{_image(r.get('truth_frames'), 'ground truth')}</td>"
            f"<td>{r.get('generated_level')}/{r.get('target_level')}</td></tr>"
            for r in turns
        ]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _delta(key: str, first: float | None, second: float | None) -> tuple[str, str]:
    """(B − A formatted, "better"/"worse"/"") for a metric."""
    if first is None or second is None or any(map(math.isnan, (first, second))):
        return "–", ""
    change = second - first
    if change == 0:
        return f"{change:+.4f}", ""
    improved = (change > 0) == SPECS[key].higher_is_better
    return f"{change:+.4f}", "better" if improved else "worse"


def compare(folders: Sequence[Path], out: Path, labels: Sequence[str] | None = None,
            name: str = "compare") -> tuple[Path, Path]:
    """`OUT/<name>.md` and `OUT/<name>.html`: the metrics of report folders side by side; with
    two, also B − A, whether that is better or worse, and B − A's 95 % interval over the games
    both played (`paired_interval`: a difference whose interval holds 0 is not told apart)."""
    reports = [json.loads((folder / METRICS_FILE).read_text(encoding="utf-8"))
               for folder in folders]
    names = list(labels or [chr(ord("A") + i) for i in range(len(folders))])
    keys = list(dict.fromkeys(key for report in reports for key in report["definitions"]))
    pair = len(reports) == 2
    lines = ["# AnimeGamer evaluation: comparison", ""]
    for label, folder, report in zip(names, folders, reports, strict=True):
        facts = ", ".join(f"{k}={v}" for k, v in report["meta"].items())
        lines.append(f"- {label}: {folder} ({facts})")
    extra = [f"{names[1]} − {names[0]}", "", "95 % (paired games)"] if pair else []
    turns = [list(read_turns(folder).values()) for folder in folders] if pair else []
    lines += ["", "| metric | " + " | ".join([*names, *extra]) + " |",
              "|---" * (1 + len(names) + len(extra)) + "|"]
    rows = []
    for key in keys:
        values = [_value(r, key) if key in r["summary"] else None for r in reports]
        change, verdict = _delta(key, *values) if pair else ("", "")
        bounds = (paired_interval(turns[0], turns[1], key)
                  if pair and key != "peak_memory_mb" else None)
        paired = f"[{bounds[0]:+.2f}, {bounds[1]:+.2f}]" if bounds else "–"
        shown = [_with_interval(_fmt(v), _interval(r, key))
                 for v, r in zip(values, reports, strict=True)]
        rows.append((key, shown, change, verdict, paired))
        cells = [*shown, change, verdict, paired] if pair else shown
        lines.append(f"| {SPECS[key].label} | " + " | ".join(cells) + " |")
    out.mkdir(parents=True, exist_ok=True)
    markdown_path = out / f"{name}.md"
    markdown_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    esc = html.escape
    page = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>comparison</title>",
            f"<style>{STYLE}</style></head><body><h1>AnimeGamer evaluation: comparison</h1><ul>"]
    page += [f"<li>{esc(label)}: {esc(str(folder))}</li>"
             for label, folder in zip(names, folders, strict=True)]
    header = "".join(f"<th>{esc(label)}</th>" for label in [*names, *extra[:1], *extra[2:]])
    page.append(f"</ul><table><tr><th>metric</th>{header}</tr>")
    for key, shown, change, verdict, paired in rows:
        tds = "".join(f"<td>{value}</td>" for value in shown)
        delta = f"<td class=\"{verdict}\">{change}</td><td>{paired}</td>" if pair else ""
        page.append(f"<tr><td>{esc(SPECS[key].label)}</td>{tds}{delta}</tr>")
    page.append("</table><h2>Across the game</h2>")
    for key in keys:
        plots = [svg_plot(r["summary"].get(key, {}).get("by_turn", {}),
                          f"{label}: {SPECS[key].label}")
                 for label, r in zip(names, reports, strict=True)]
        page.append(f"<div class=\"plots\">{''.join(plots)}</div>")
    page.append("</body></html>\n")
    html_path = out / f"{name}.html"
    html_path.write_text("".join(page), encoding="utf-8")
    return markdown_path, html_path
