"""The errors the library raises for what a user got wrong.

:class:`ConfigError` names the key and the allowed values; :class:`SweepRefused` ends a multirun
refused before any job ran. Turning these (and Hydra's, OmegaConf's and the file system's errors)
into the command line's one-line messages is :mod:`mathneuro.cli.errors`' job.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is wrong; the message names the key and the allowed values."""


class SweepRefused(BaseException):
    """A multirun refused before any job ran (a Hydra callback raises it: Hydra turns an ``Exception``
    raised there into a warning, so this is a ``BaseException`` that the CLI ends with exit code 2)."""
