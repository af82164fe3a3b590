"""Run cells inside a container image: the image brings vLLM and torch, the kit brings its tests.

``spec`` computes the container from the host's plan (pure: mounts, GPU devices, variables,
command); ``docker_io`` is the one place that talks to a Docker engine; ``vendor`` stages the
kit's pure-Python dependencies for the image; ``run`` ties them together and writes each
cell's results, crashed or not: a failure is a result, never a traceback.
"""

from __future__ import annotations

from repro.container.docker_io import Ran, exit_reason, run_spec
from repro.container.errors import ContainerError
from repro.container.run import DEFAULT_TIMEOUT, Outcome, run_in_image
from repro.container.spec import CELL_TESTS, DEPS, SCRATCH, ContainerSpec, Mount, container_spec
from repro.container.vendor import stage_dependencies

__all__ = [
    "CELL_TESTS",
    "DEFAULT_TIMEOUT",
    "DEPS",
    "SCRATCH",
    "ContainerError",
    "ContainerSpec",
    "Mount",
    "Outcome",
    "Ran",
    "container_spec",
    "exit_reason",
    "run_in_image",
    "run_spec",
    "stage_dependencies",
]
