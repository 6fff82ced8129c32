"""Run-time settings, read once from environment variables (documented in docs/hardware.md)."""

from __future__ import annotations



