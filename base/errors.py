"""Errors that are the user's to fix: the CLI prints them in one line, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in how groupcoord was invoked or configured."""

    exit_code = 2


class StartupError(UserError):
    """The node could not start for a reason outside its configuration's syntax (e.g. the port is taken)."""

    exit_code = 1
