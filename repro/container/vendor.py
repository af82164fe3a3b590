"""The kit's cell dependencies, copied from this environment into a directory mounted into the image."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from repro.container.errors import ContainerError
from repro.container.spec import KIT_ROOT


def _cell_requirements() -> list[Requirement]:
    """The cell extra's requirements, each of the kit's own extras it names (``vllm-wslpin-kit[core]``) replaced by
    that extra's: the kit itself is mounted into the image, never copied as a dependency."""
    project = tomllib.loads((KIT_ROOT / "pyproject.toml").read_text())["project"]
    extras, own = project["optional-dependencies"], canonicalize_name(project["name"])
    found, todo = [Requirement(r) for r in project["dependencies"]], [Requirement(r) for r in extras["cell"]]
    while todo:
        req = todo.pop()
        if canonicalize_name(req.name) == own:
            todo += [Requirement(r) for extra in sorted(req.extras) for r in extras[extra]]
        else:
            found.append(req)
    return found


def stage_dependencies(build: Path) -> Path:
    """Copy the kit's cell dependencies, and theirs, from this environment into a directory for the image.

    An image brings its own Python (vllm/vllm-openai: 3.12) and may have no network, so
    nothing is installed there: these packages are pure Python and work on any Python the
    kit supports. The directory is named by their versions and reused.
    """
    dists: dict[str, metadata.Distribution] = {}
    todo = _cell_requirements()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in dists:
            continue
        try:
            dist = dists[key] = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise ContainerError(
                f"{req.name} is not installed in this Python: install the kit with `pip install -e '.[cell,container]'`"
            ) from None
        if "Root-Is-Purelib: true" not in (dist.read_text("WHEEL") or ""):
            raise ContainerError(f"{req.name} is not a pure-Python wheel here, so it cannot be mounted into an image")
        todo += [Requirement(r) for r in dist.requires or []]
    stamp = ",".join(sorted(f"{k}=={d.version}" for k, d in dists.items()))
    dest = build / "container-deps" / hashlib.sha256(stamp.encode()).hexdigest()[:12]
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".staging-"))
    for dist in dists.values():
        for file in dist.files or []:
            # Scripts live outside site-packages (../../bin); compiled bytecode is the image's business.
            if file.parts[0] == ".." or file.suffix == ".pyc":
                continue
            target = staging / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(str(dist.locate_file(file))), target)
    staging.chmod(0o755)  # mkdtemp's 0700 would hide it from a container user other than ours
    staging.rename(dest)
    return dest
