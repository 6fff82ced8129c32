"""The game's CSS: theme-aware (Gradio's colour variables, tints mixed with transparency, never
a fixed light background), tap targets of at least 44 px, one column on phones."""

TAP = "44px"
TINT = "color-mix(in srgb, {colour} {amount}%, transparent)"


def tint(colour: str, amount: int) -> str:
    """`colour` over whatever the theme's background is: readable in light and dark mode."""
    return TINT.format(colour=colour, amount=amount)


RED, AMBER, GREEN = "#ef4444", "#f59e0b", "#22c55e"
CLIP_HEIGHT = 340
"""The stage's height on a laptop; the live preview covers exactly this."""
PHONE_CLIP_HEIGHT = 230

CSS = f"""
#ag-top {{ margin-bottom: 2px; }}
.ag-header {{ display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 14px; }}
.ag-header h1 {{ margin: 0; font-size: 1.6rem; }}
.ag-tagline {{ color: var(--body-text-color-subdued); }}
.ag-duplicate {{ margin-top: 4px; font-size: 0.9em; color: var(--body-text-color-subdued); }}
.ag-banner {{ margin-top: 6px; border: 1px solid {tint(AMBER, 55)}; background: {tint(AMBER, 12)};
  border-radius: 8px; padding: 4px 12px; color: var(--body-text-color); font-size: .92em; }}
.ag-banner summary {{ cursor: pointer; min-height: 28px; line-height: 28px; }}
.ag-banner p {{ margin: 4px 0 6px; }}
#ag-clip video {{ object-fit: contain; }}
.ag-gauges {{ display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px 12px;
  padding: 2px; }}
.ag-gauge-head {{ display: flex; flex-wrap: wrap; align-items: baseline; gap: 2px 8px;
  margin-bottom: 3px; }}
.ag-gauge-label {{ font-weight: 600; flex: 1 1 auto; }}
.ag-gauge-value {{ font-variant-numeric: tabular-nums; font-weight: 700; }}
.ag-gauge-value small {{ font-weight: 400; opacity: .6; }}
.ag-change {{ display: inline-block; font-size: .85em; padding: 1px 8px; border-radius: 999px;
  text-align: center; font-variant-numeric: tabular-nums; color: var(--body-text-color);
  border: 1px solid transparent; min-width: 3.2em; white-space: nowrap; }}
.ag-up {{ background: {tint(GREEN, 22)}; border-color: {tint(GREEN, 45)}; }}
.ag-down {{ background: {tint(RED, 20)}; border-color: {tint(RED, 45)}; }}
.ag-flat, .ag-none {{ background: {tint("#94a3b8", 18)}; border-color: {tint("#94a3b8", 35)}; }}
.ag-track {{ position: relative; height: 14px; border-radius: 7px; overflow: hidden;
  background: linear-gradient(to right, {tint(RED, 18)} 0 30%, {tint(AMBER, 18)} 30% 70%,
  {tint(GREEN, 18)} 70% 100%); }}
.ag-fill {{ height: 100%; border-radius: 7px; transition: width .4s ease; }}
.ag-fill.ag-low {{ background: {RED}; }}
.ag-fill.ag-mid {{ background: {AMBER}; }}
.ag-fill.ag-high {{ background: {GREEN}; }}
#ag-command input, #ag-command textarea {{ min-height: {TAP}; font-size: 16px; }}
.ag-counter, .ag-counter p {{ margin: 0 !important; padding: 0 4px; text-align: right;
  font-size: .8em; color: var(--body-text-color-subdued); }}
#ag-main #ag-command.ag-invalid input, #ag-main #ag-command.ag-invalid textarea {{
  box-shadow: inset 0 0 0 2px {RED} !important; border-color: {RED} !important; }}
#ag-main button, #ag-side button, .ag-chip-row button {{ min-height: {TAP}; }}
#ag-main .ag-chip-row button {{ min-width: {TAP}; }}
.ag-chip-row {{ padding: 2px 4px !important; }}
.ag-chip-row button.gallery-item {{ flex: 0 0 auto; border-radius: 999px; }}
.ag-chip-row button.gallery-item div {{ white-space: nowrap !important; width: auto !important; }}
.ag-chip-row .gallery {{ flex-wrap: wrap !important; }}
.ag-story-title {{ margin: 0; font-size: 1.1rem; }}
.ag-status {{ height: 52px; overflow-y: auto; }}  /* a long message scrolls, moves nothing */
#ag-chat .icon-button-wrapper.top-panel {{ display: none; }}  /* the Chatbot's own trash: it
  emptied the view only, and the next turn brought the story back (Undo, New game act on it) */
#ag-character input {{ padding-right: 32px; text-overflow: ellipsis; }}
#ag-preview {{ height: 0; min-height: 0; padding: 0; border: 0; overflow: visible;
  position: relative; z-index: 3; margin-bottom: calc(-1 * var(--layout-gap)); }}
#ag-preview .html-container, #ag-preview .prose {{ position: static; padding: 0; }}
.ag-preview {{ position: absolute; top: 0; left: 0; right: 0; height: {CLIP_HEIGHT}px;
  display: flex; gap: 4px; align-items: center; justify-content: center; overflow: hidden;
  border-radius: var(--block-radius); background: var(--block-background-fill);
  pointer-events: none; }}
.ag-preview img {{ flex: 1 1 0; min-width: 0; max-height: 100%; object-fit: contain; }}
.ag-preview-label {{ position: absolute; bottom: 8px; left: 12px; font-size: .85em;
  padding: 1px 8px; border-radius: 999px; background: {tint("#94a3b8", 30)}; }}
.ag-chip-tabs .tab-container button {{ padding: 0 12px; min-width: {TAP}; }}
#ag-actions button {{ flex: 0 1 auto; }}
.ag-suggestions {{ gap: 2px !important; }}
.ag-chip-row .gallery {{ gap: 6px; }}
.ag-chip-row .label {{ margin-bottom: 2px; }}
#ag-avatar {{ flex: 0 0 56px !important; }}
#ag-avatar button {{ width: 56px; min-width: 0; padding: 0; }}
#ag-avatar img {{ width: 56px; height: 56px; object-fit: contain; }}
.ag-status p {{ margin: 2px 0; color: var(--body-text-color-subdued); }}
#ag-chat video {{ max-height: 170px; width: auto; }}
.ag-story .ag-sentence {{ font-weight: 600; margin-bottom: 4px; }}
.ag-story .ag-chips {{ display: flex; flex-wrap: wrap; gap: 4px; margin: 4px 0; }}
.ag-meta {{ font-size: .85em; color: var(--body-text-color-subdued); }}
.ag-nudge {{ margin-top: 4px; padding: 2px 8px; border-radius: 6px;
  border-left: 3px solid {AMBER}; background: {tint(AMBER, 14)}; }}
.ag-refusal {{ padding: 2px 8px; border-radius: 6px; border-left: 3px solid {RED};
  background: {tint(RED, 12)}; }}
.ag-pending {{ font-style: italic; }}
.ag-pending-bar {{ height: 4px; margin-top: 6px; border-radius: 2px; overflow: hidden;
  background: linear-gradient(90deg, transparent 0%, var(--color-accent) 50%, transparent 100%);
  background-size: 200% 100%; animation: ag-slide 1.2s linear infinite; }}
@keyframes ag-slide {{ from {{ background-position: 100% 0; }}
  to {{ background-position: -100% 0; }} }}
#ag-history table {{ min-width: 900px; }}
@media (max-width: 640px) {{
  .ag-header h1 {{ font-size: 1.25rem; }}
  .ag-tagline {{ display: none; }}
  #ag-clip {{ height: {PHONE_CLIP_HEIGHT}px !important; }}
  .ag-preview {{ height: {PHONE_CLIP_HEIGHT}px; }}
  #ag-character .info-text {{ display: none; }}
  .ag-chip-tabs .tab-container button {{ padding: 0 8px; }}
  #ag-command-row {{ flex-wrap: wrap; }}
  [id^="ag-examples-"] button.gallery-item {{ max-width: 100%; }}  /* long examples wrap */
  [id^="ag-examples-"] button.gallery-item div {{ white-space: normal !important; }}
  #ag-command-row > * {{ min-width: 100% !important; }}
  .ag-gauges {{ gap: 6px; }}
  .ag-gauge-label {{ flex-basis: 100%; font-size: .85em; }}
  .ag-gauge-value small {{ display: none; }}
}}
"""
