"""The exit statuses of every `python -m animegamer…` command."""

EXIT_OK = 0
EXIT_ERROR = 2
"""Input the command cannot use; it printed one line on stderr saying why."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C (128 + SIGINT, as a shell reports it); a rerun continues where it stopped."""
