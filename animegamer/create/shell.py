"""The command lines `create` prints, each one that runs verbatim in a fresh shell from any
folder: it enters the project folder first (where `python -m animegamer` finds the package
without an install), runs the interpreter that runs `create` (a virtual environment's `python`
is not on a fresh shell's PATH) and names every path in full (it runs in another folder than
the one it was printed in)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence

from animegamer.paths import PACKAGE_ROOT


def python_line(module: str, arguments: Sequence[str],
                environment: Mapping[str, str] | None = None) -> str:
    """`cd PROJECT && [NAME=VALUE ...] PYTHON -m MODULE ARGUMENTS`, every word quoted for a
    POSIX shell. Paths in `arguments` and `environment` must be absolute."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (environment or {}).items()]
    command = shlex.join([sys.executable, "-m", module, *arguments])
    return " ".join([f"cd {shlex.quote(str(PACKAGE_ROOT.parent))} &&", *assignments, command])
