"""The one error of the container runner."""

from __future__ import annotations


class ContainerError(Exception):
    """Why the container gave no results, in one line for a person."""
