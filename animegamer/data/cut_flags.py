"""The cut-detection flags, the same on `python -m animegamer.data build` and
`python -m animegamer.create` (docs/characters.md names them): each sets a field of
`shots.CutOptions`."""

from __future__ import annotations

import argparse

from animegamer.data.shots import (
    ADAPTIVE_THRESHOLD,
    CUT_THRESHOLD,
    DISCONTINUITY_THRESHOLD,
    CutOptions,
)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: a number above 0 is needed")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: a number from 0 to 1 is needed")
    return value


def add_cut_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--cut-threshold`, `--adaptive-threshold` and `--discontinuity-threshold`."""
    parser.add_argument("--cut-threshold", type=_positive, default=CUT_THRESHOLD,
                        help="PySceneDetect's content threshold: a colour and edge change this "
                        f"large is a cut anywhere (default {CUT_THRESHOLD:g})")
    parser.add_argument("--adaptive-threshold", type=_positive, default=ADAPTIVE_THRESHOLD,
                        help="PySceneDetect's adaptive threshold: a content spike this many "
                        "times its neighbours' may be a cut between shots on one background "
                        f"(default {ADAPTIVE_THRESHOLD:g})")
    parser.add_argument("--discontinuity-threshold", type=_share,
                        default=DISCONTINUITY_THRESHOLD,
                        help="how discontinuous the foreground must be at a spike, a hash or a "
                        "histogram change for it to be a cut (0-1; lower finds more cuts and "
                        f"splits more fast motion; default {DISCONTINUITY_THRESHOLD:g})")


def cut_options(args: argparse.Namespace) -> CutOptions:
    """The `CutOptions` the flags of `add_cut_arguments` give."""
    return CutOptions(args.cut_threshold, args.adaptive_threshold, args.discontinuity_threshold)
