"""The vLLM WSL2 pinned-memory compatibility kit."""

# The kit's one version: the wheel's (pyproject.toml reads it here), `--version`'s, and the newest heading of
# CHANGELOG.md (tests/kit/test_version.py). Here and not from the installed metadata, which a checkout run as
# `python3 -m matrix` has none of.
__version__ = "0.3.0"
