"""Kernel edges: unames at the borders of vLLM's WSL2 kernel gate, each tested on the host the kit makes of it.

PR #50126's review asked for tests of ``_get_wsl_kernel_version()``'s branches. Each edge is a
``uname`` vLLM is shown (release and node name); which cells it belongs to is the kit's own
classification of that uname (``classify_host``, the one that decides a real machine's host),
so vLLM answering otherwise than the cell's rules is a result, not a second mapping to keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from matrix.cells import Host
from matrix.host.classify import HostFacts, classify_host

# A node name that says nothing: only the node-name edge puts "microsoft" there.
NODE = "wslpin-edge"


@dataclass(frozen=True)
class KernelEdge:
    name: str  # in case ids and the JUnit ``kernel_edge`` property
    release: str
    node: str = NODE
    # WSL's own variable set, as on every WSL distribution: vLLM reads the uname only, so it changes nothing.
    wsl_distro: bool = False

    @cached_property
    def host(self) -> Host:
        environ = {"WSL_DISTRO_NAME": "wslpin-edge"} if self.wsl_distro else {}
        return classify_host(HostFacts(uname={"node": self.node, "release": self.release}, environ=environ))


KERNEL_EDGES: tuple[KernelEdge, ...] = (
    KernelEdge("4.19.121", "4.19.121-microsoft-standard"),  # the first kernel the gate lets through
    KernelEdge("4.19.120", "4.19.120-microsoft-standard"),  # the last one it stops
    KernelEdge("unparsable", "microsoft-custom"),  # no version: the gate must stop it
    KernelEdge("wsl1", "4.4.0-19041-Microsoft"),  # WSL1's release, capitalised
    KernelEdge("custom-wsl2+", "5.15.167.4-microsoft-standard-WSL2+"),  # a self-built kernel's suffix
    KernelEdge("node-name", "6.8.0-45-generic", node="MICROSOFT-PC"),  # "microsoft" only in the node name
    KernelEdge("azure", "5.15.0-1057-azure"),  # a Microsoft cloud VM that is not WSL
    KernelEdge("rc", "5.15.0rc1-microsoft-standard-WSL2"),  # a pre-release: vLLM cannot int() "0rc1"
    KernelEdge("two-part", "5.15-microsoft-standard-WSL2"),  # no patch number: vLLM compares (5, 15)
    # WSL by its variable, with a kernel built without "microsoft" in its release: vLLM reads native Linux.
    KernelEdge("wsl-variable-only", "6.6.87-custom", wsl_distro=True),
)

# Unames vLLM's own reading (in_wsl, _get_wsl_kernel_version) is asked of in every release, against the kit's
# (vllm_in_wsl, vllm_kernel_version): every version form below with every suffix and node, so a release whose
# parsing differs anywhere in that space fails the history, not a user's doctor.
_VERSIONS = (
    "4.19.121",
    "4.19.120",
    "4.19",
    "4.20",
    "5.15.167.4",
    "6.6.87.2",
    "4.4.0",
    "10.0.0",
    "5.15.0rc1",
    "5.15.0+",
    " 5.15.1",
    "5_0.15.1",
    "5.15.x",
    "5",
    "",
    "٥.١٥.١",
    "4.19.121.0.0",
)
_SUFFIXES = ("-microsoft-standard-WSL2", "-microsoft-standard", "-Microsoft", "-19041-Microsoft", "-generic", "")
_NODES = (NODE, "MICROSOFT-PC")
READING_SAMPLES: tuple[tuple[str, str], ...] = tuple(
    (version + suffix, node) for version in _VERSIONS for suffix in _SUFFIXES for node in _NODES
)
