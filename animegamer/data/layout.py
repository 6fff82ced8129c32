"""Where everything lives in a dataset folder, and the ids of videos and shots.

Inside the dataset folder:

    README.md                              dataset card (its YAML tells `datasets` where the
                                           splits are)
    data/{split}-00000-of-00001.parquet    one row per shot
    clips/<video id>/<shot id>.mp4         the shots (paths in rows are relative)
    features/<video id>/<shot id>.safetensors
    reference.<ext>                        the character's reference image
    answers_template.jsonl                 one line per kept shot (video, start, end) with
                                           empty answer fields, to annotate by hand
    levels.json                            the fitted motion levels (`MotionLevels.to_dict`)
    report.json                            what each stage did, and every skip with its reason
    work/                                  the build's records (what makes a rerun resume)
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from animegamer.data.decode import DECODE_FPS

DATA = "data"
CLIPS = "clips"
FEATURES = "features"
WORK = "work"
REPORT = "report.json"
LEVELS = "levels.json"
CARD = "README.md"
REFERENCE = "reference"
TEMPLATE = "answers_template.jsonl"
CLIP_LOG = f"{WORK}/clips.jsonl"
VIDEO_LOG = f"{WORK}/videos.jsonl"
ANSWER_LOG = f"{WORK}/answers.jsonl"
OPTIONS = f"{WORK}/options.json"

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def video_id(name: str) -> str:
    """A file-name-safe id for the video at relative path `name`: readable and unique."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    slug = _UNSAFE.sub("-", Path(name).with_suffix("").as_posix()).strip("-")[:40]
    return f"{slug or 'video'}-{digest}"


def start_ms(start_frame: int) -> int:
    return round(start_frame * 1000 / DECODE_FPS)


def shot_id(video: str, start_frame: int) -> str:
    """`<video id>-<start in ms, 9 digits>`: sorts in time order within a video."""
    return f"{video}-{start_ms(start_frame):09d}"


def clip_path(video: str, shot: str) -> str:
    return f"{CLIPS}/{video}/{shot}.mp4"


def features_path(video: str, shot: str) -> str:
    return f"{FEATURES}/{video}/{shot}.safetensors"
