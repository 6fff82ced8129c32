"""AnimeGamer Space entry point: build the game once at import, then serve it.

`python app.py` serves on 127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override it).
Without a GPU or without the checkpoints, the game runs on the preview engine and says so.
"""

import logging
import sys

from animegamer.ui import create_app
from animegamer.ui.startup import StartupError

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

try:
    demo, launch_kwargs = create_app()
except StartupError as error:
    sys.exit(f"AnimeGamer cannot start: {error}")

if __name__ == "__main__":
    demo.launch(**launch_kwargs)
