"""AnimeGamer Space entry point: build the game once at import, then serve it.

`python app.py` serves on 127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override it).
Without a GPU or without the checkpoints, the game runs on the preview engine and says so. The
log shows the game's own lines; `python app.py --verbose` adds the libraries' messages and
progress bars.
"""

import logging
import sys

from animegamer.cli.output import configure_output, hide_progress_bars

VERBOSE = "--verbose" in sys.argv[1:]
configure_output(VERBOSE, own_level=logging.INFO, timestamps=True)
if not VERBOSE:
    hide_progress_bars()

from animegamer.ui import create_app  # noqa: E402  (after the logging set-up: its import speaks)
from animegamer.ui.startup import StartupError  # noqa: E402

try:
    demo, launch_kwargs = create_app()
except StartupError as error:
    sys.exit(f"AnimeGamer cannot start: {error}")

if __name__ == "__main__":
    demo.launch(**launch_kwargs)
