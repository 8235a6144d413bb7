"""Argument helpers shared by the commands: list parsing and config errors named by flag.

Config dataclasses validate themselves and name their fields (``num_envs``); a user typed
flags (``--envs``). ``flag_message`` rewrites one into the other so an error points at
what to change on the command line.
"""

from __future__ import annotations

import argparse
import re

from lobsurf.errors import UserError


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option with its default, unless the default says nothing (None,
    False) or the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or "(default" in text or not action.option_strings
                or action.default is None or action.default is False  # not 0 == False
                or action.default == argparse.SUPPRESS):
            return text
        return text + " (default: %(default)s)"


def int_list(text: str, flag: str, what: str = "whole numbers") -> tuple[int, ...]:
    """``"10,50"`` → (10, 50); one UserError naming ``flag`` for anything else."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} must be comma-separated {what}, got {text!r}") from None
    return values


def flag_message(message: str, flags: dict[str, str]) -> str:
    """``message`` with each whole-word config name (a key of ``flags``) replaced by its flag."""
    if not flags:
        return message
    names = sorted(flags, key=len, reverse=True)  # longest first: "momentum lookback" before "lookback"
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return pattern.sub(lambda m: flags[m.group(1)], message)


def config_error(exc: ValueError, flags: dict[str, str], prefix: str = "") -> UserError:
    """A UserError for a config's ValueError, its field names replaced by flags."""
    return UserError(prefix + flag_message(str(exc), flags))
