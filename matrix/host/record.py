"""The environment record ``python -m matrix env`` writes: one loader that checks every field the kit reads.

``classify.environment_record`` writes it; everything else reads it through ``EnvironmentRecord``, whose
loader refuses a record with one line (what is wrong, how to write a good one) before any field is read, so
that a record from another machine (an offline GPU run's folder, a container's scratch, a runner's artifact)
is never half read. Standard library only: ``env`` and ``plan`` run on a bare Python 3.8.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Tuple, Union

from matrix.cells import Host, Stack
from matrix.errors import MatrixError
from matrix.host.classify import ENV_SCHEMA, DetectedHost, Gpu, HostFacts, Names
from matrix.io.records import read_record
from matrix.releases import UNKNOWN_RELEASE

_TEXT = (str, type(None))
_Path = Tuple[Union[str, int], ...]
# Each field the kit reads, and the JSON types it reads it as (absent reads as None). One entry per field:
# a record failing one is refused whole.
FIELDS: tuple[tuple[_Path, tuple[type, ...]], ...] = (
    (("host",), (dict,)),
    *((("host", key), _TEXT) for key in ("detected", "stack", "stack_reason")),
    (("uname",), (dict, type(None))),
    *((("uname", key), _TEXT) for key in ("node", "release", "system")),
    (("kernel",), (dict,)),
    (("kernel", "release"), _TEXT),
    (("kernel", "version"), (list, type(None))),
    (("wsl",), (dict,)),
    *((("wsl", key), (bool, type(None))) for key in ("is_wsl", "interop")),
    (("gpu",), (dict,)),
    (("gpu", "devices"), (list, type(None))),
    (("gpu", "devices", 0), (dict, type(None))),
    *((("gpu", "devices", 0, key), _TEXT) for key in ("name", "driver")),
    *((("gpu", key), (bool, type(None))) for key in ("dev_kfd", "dev_dxg")),
    (("packages",), (dict,)),
    *((("packages", name), (dict, type(None))) for name in ("torch", "vllm")),
    (("packages", "torch_mismatch"), (bool, type(None))),
    *((("packages", "torch", key), _TEXT) for key in ("version", "cuda", "hip")),
    *((("packages", "vllm", key), _TEXT) for key in ("version", "commit", "requires_torch", "source")),
    (("env_hash",), _TEXT),
    (("environment",), (dict, type(None))),
)


_NOT_WRITTEN = "is not an environment record as `python -m matrix env` writes it"


def _field(record: object, path: _Path) -> object:
    for key in path:
        if isinstance(key, int):
            record = record[key] if isinstance(record, list) and len(record) > key else None
        else:
            record = record.get(key) if isinstance(record, dict) else None
    return record


def _where(path: _Path) -> str:
    return ".".join(map(str, path))


@dataclass(frozen=True)
class EnvironmentRecord:
    """One machine's record, as written (it is hashed, stored beside results and shown), read through properties."""

    data: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: object, name: str, again: str) -> EnvironmentRecord:
        """``data`` if it is an environment record whose every read field has its kind; else one line naming
        ``name``, the first field that is wrong, and ``again`` (how to write a good one)."""
        if not isinstance(data, dict) or data.get("schema") != ENV_SCHEMA:
            raise MatrixError(f"{name} is not an environment record (schema {ENV_SCHEMA}): {again}")
        for path, kinds in FIELDS:
            value = _field(data, path)
            if not isinstance(value, kinds):
                raise MatrixError(f"{name} {_NOT_WRITTEN} (its {_where(path)} is {type(value).__name__}): {again}")
        version = _field(data, ("kernel", "version"))
        if version is not None and not (
            isinstance(version, list) and len(version) == 3 and all(type(p) is int and p >= 0 for p in version)
        ):
            raise MatrixError(f"{name} {_NOT_WRITTEN} (its kernel.version is not three numbers): {again}")
        stack = _field(data, ("host", "stack"))
        if _field(data, ("host", "detected")) not in {host.value for host in Host} or (
            stack is not None and stack not in {stack.value for stack in Stack}
        ):
            raise MatrixError(f"{name} {_NOT_WRITTEN} (its host names no host and stack of the matrix): {again}")
        return cls(data)

    @classmethod
    def read(cls, path: Path, name: str, again: str) -> EnvironmentRecord:
        """The record at ``path``: read as an untrusted input (``matrix.io.records``), then checked as above."""
        return cls.from_json(read_record(path, ENV_SCHEMA, name, "an environment record", again), name, again)

    def to_json(self) -> str:
        """The record as ``python -m matrix env`` writes it, and as it is kept beside each cell's results."""
        return json.dumps(self.data, indent=2, sort_keys=True) + "\n"

    def _text(self, *path: str | int) -> str:
        return str(_field(self.data, path) or "")

    def host_facts(self) -> HostFacts:
        """The facts the record was written from, as far as it keeps them: what the doctor answers for when it is
        given another machine's record. Its GPUs are the stack's the record detected; text values only."""
        uname, environ = _field(self.data, ("uname",)), _field(self.data, ("environment",))
        devices = _field(self.data, ("gpu", "devices"))
        uname = uname if isinstance(uname, dict) else {}
        environ = environ if isinstance(environ, dict) else {}
        devices = devices if isinstance(devices, list) else []
        gpus = tuple(
            Gpu(str(device.get("name") or ""), str(device.get("driver") or ""))
            for device in devices
            if isinstance(device, dict) and isinstance(device.get("name"), _TEXT)
        )
        stack = self._text("host", "stack")
        torch, vllm = _field(self.data, ("packages", "torch")), _field(self.data, ("packages", "vllm"))
        return HostFacts(
            uname={k: v for k, v in uname.items() if isinstance(v, str)},
            environ={k: v for k, v in environ.items() if isinstance(v, str)},
            wsl_interop=_field(self.data, ("wsl", "interop")) is True,
            dev_kfd=_field(self.data, ("gpu", "dev_kfd")) is True,
            dev_dxg=_field(self.data, ("gpu", "dev_dxg")) is True,
            nvidia_gpus=gpus if stack == Stack.CUDA.value else (),
            amd_gpus=gpus if stack == Stack.ROCM.value else (),
            torch={k: v for k, v in torch.items() if isinstance(v, _TEXT)} if isinstance(torch, dict) else None,
            vllm={k: v for k, v in vllm.items() if isinstance(v, _TEXT)} if isinstance(vllm, dict) else None,
        )

    @property
    def schema(self) -> str:
        return self._text("schema")

    @property
    def env_hash(self) -> str:
        return self._text("env_hash")

    @property
    def node(self) -> str:
        """The machine's network name (uname), which names the runner where no other name is known."""
        return self._text("uname", "node")

    @property
    def names(self) -> Names:
        """What in the record names its machine, as a bundle's intake takes it out of a user's results: its node
        and its WSL distribution (its homes it already shows as ``~``)."""
        distros = (self._text("wsl", "distro"), self._text("environment", "WSL_DISTRO_NAME"))
        return Names.of(hosts=(self.node,), distros=distros)

    @property
    def vllm_release(self) -> str:
        """The installed vLLM's version, or ``unknown`` where the record names none."""
        return self._text("packages", "vllm", "version") or UNKNOWN_RELEASE

    @property
    def vllm_commit(self) -> str:
        return self._text("packages", "vllm", "commit")

    @property
    def vllm_source(self) -> str:
        """Where vLLM came from when not from an index: a wheel file's or a source checkout's URL; "" otherwise."""
        return self._text("packages", "vllm", "source")

    @property
    def vllm_requires_torch(self) -> str:
        """The torch requirement in vLLM's metadata (``==2.13.0``), "" where it names none."""
        return self._text("packages", "vllm", "requires_torch")

    @property
    def has_torch(self) -> bool:
        return bool(_field(self.data, ("packages", "torch")))

    @property
    def torch_version(self) -> str:
        return self._text("packages", "torch", "version")

    @property
    def torch_build(self) -> str:
        """``cuda X``, ``hip X`` or ``cpu``: which GPU stack the installed torch was built for."""
        cuda, hip = self._text("packages", "torch", "cuda"), self._text("packages", "torch", "hip")
        return f"cuda {cuda}" if cuda else f"hip {hip}" if hip else "cpu"

    @property
    def torch_mismatch(self) -> bool | None:
        """Whether torch is outside the one vLLM asks for; None where unknown."""
        return _field(self.data, ("packages", "torch_mismatch"))  # type: ignore[return-value]

    @property
    def kernel_release(self) -> str:
        return self._text("kernel", "release")

    @property
    def is_wsl(self) -> bool:
        """WSL by any sign (the record's; the host cell follows vLLM's reading of the uname)."""
        return bool(_field(self.data, ("wsl", "is_wsl")))

    @property
    def gpu_name(self) -> str:
        return self._text("gpu", "devices", 0, "name")

    @property
    def gpu_driver(self) -> str:
        return self._text("gpu", "devices", 0, "driver")

    @property
    def detected_host(self) -> str:
        """The host cell's name the machine was detected as (``linux``, ``wsl2old``, ``wsl2new``)."""
        return self._text("host", "detected")

    @property
    def detected(self) -> DetectedHost:
        """The host as ``python -m matrix env`` detected it on that machine: what its plan is made for."""
        stack = self._text("host", "stack")
        kernel = _field(self.data, ("kernel", "version"))
        return DetectedHost(
            host=Host.parse(self.detected_host),
            stack=Stack.parse(stack) if stack else None,
            kernel=tuple(kernel) if kernel else None,  # type: ignore[arg-type]
            gpu=self.gpu_name,
            stack_reason=self._text("host", "stack_reason"),
        )
