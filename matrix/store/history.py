"""The history run: each release's results reused from the cache or the committed archive, or computed and kept.

``run_history`` places every release's results in ``results/history/<v>/`` and says, release by release, what it did
and how far it is; a recomputed copy is compared with the kept one, without what is volatile by nature.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matrix.case_facts import TIMINGS, CaseFacts
from matrix.envelope import MACHINE_NAMES, RUN_STAMP
from matrix.errors import MatrixError
from matrix.junit import outcome_word, parse_own, properties, suites
from matrix.store.history_archive import (
    cached_entry,
    entry_files,
    place,
    read_committed,
    result_files,
    store,
    unpacked,
    write_committed,
)
from matrix.store.history_key import KeyInputs
from matrix.text.progress import progress

# Volatile by nature, so no difference between a cached and a recomputed release: a case's timings, the run's
# stamp and the machine's names of today (matrix.case_facts, matrix.envelope say why). XML attributes (time,
# timestamp, hostname) are never compared: only names, outcomes and properties are.
VOLATILE_CASE_PROPERTIES = TIMINGS
VOLATILE_SUITE_PROPERTIES = RUN_STAMP | MACHINE_NAMES


Case = tuple[str, str, tuple[tuple[str, str], ...]]  # (classname::name, outcome, properties)


def _kept(props: Mapping[str, str], volatile: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, value) for name, value in props.items() if name not in volatile))


def normalised(directory: Path) -> dict[str, tuple[tuple[tuple[str, str], ...], dict[str, Case]]]:
    """Per cell file: its suite's properties and its cases, without what is volatile by nature."""
    cells = {}
    for path in sorted(directory.glob("*.xml")):
        suite_props: tuple[tuple[str, str], ...] = ()
        cases: dict[str, Case] = {}
        for suite in suites(parse_own(path))[0]:
            suite_props += _kept(suite.props, VOLATILE_SUITE_PROPERTIES)
            for case in suite.cases:
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                cases[name] = (name, outcome_word(case), _kept(properties(case), VOLATILE_CASE_PROPERTIES))
        cells[path.name] = (suite_props, cases)
    return cells


def result_differences(cached: Path, recomputed: Path) -> tuple[str, ...]:
    """Each way ``recomputed``'s JUnit differs from ``cached``'s, one line each (normalised: see above)."""
    old, new = normalised(cached), normalised(recomputed)
    lines = [f"{name}: only in the cached copy" for name in sorted(old.keys() - new.keys())]
    lines += [f"{name}: only in the recomputation" for name in sorted(new.keys() - old.keys())]
    for name in sorted(old.keys() & new.keys()):
        (old_props, old_cases), (new_props, new_cases) = old[name], new[name]
        if old_props != new_props:
            changed = sorted(set(old_props) ^ set(new_props))
            lines.append(f"{name}: suite properties {changed}")
        for case in sorted(old_cases.keys() | new_cases.keys()):
            before, after = old_cases.get(case), new_cases.get(case)
            if before is None or after is None:
                lines.append(f"{name}: {case}: only in the {'recomputation' if before is None else 'cached copy'}")
            elif before[1] != after[1]:
                lines.append(f"{name}: {case}: {before[1]} -> {after[1]}")
            elif before[2] != after[2]:
                old_map, new_map = dict(before[2]), dict(after[2])
                for prop in sorted(old_map.keys() | new_map.keys()):
                    if old_map.get(prop) != new_map.get(prop):
                        lines.append(f"{name}: {case}: {prop}: {old_map.get(prop)!r} -> {new_map.get(prop)!r}")
    return tuple(lines)


def timed_out(directory: Path) -> bool:
    """Whether a vLLM child of any case in ``directory``'s JUnit ran out of time (the case states it: CaseFacts)."""
    for path in directory.glob("*.xml"):
        for suite in suites(parse_own(path))[0]:
            if any(CaseFacts.from_properties(properties(case)).timed_out for case in suite.cases):
                return True
    return False


def recheck_choice(versions: Sequence[str], commit: str) -> frozenset[str]:
    """``--recheck auto``: the newest release (``versions`` oldest first) and one other picked by the commit."""
    if not versions:
        return frozenset()
    others = versions[:-1]
    try:
        pick = int(commit, 16) if commit else 0
    except ValueError:
        raise MatrixError(f"{commit!r} is not a git commit hash: run from a git clone of the kit") from None
    return frozenset({versions[-1], *([others[pick % len(others)]] if others else [])})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the history did with one release."""

    version: str
    key: str
    action: str  # "reused", "computed", "recomputed" (a cached copy was checked), "computed nothing", or not stored
    seconds: float
    differences: tuple[str, ...] = ()
    source: str = "cache"  # of a reused or rechecked copy: the user's "cache" or the kit's "committed" results

    def line(self) -> str:
        copy = "its committed copy" if self.source == "committed" else "its cached copy"
        said = self.action
        if self.action == "reused" and self.source == "committed":
            said = "reused its committed results"
        elif self.action == "recomputed":
            said = f"recomputed, {'DIFFERS from' if self.differences else 'same as'} {copy}"
        return f"vLLM {self.version}: {said} (key {self.key}) in {self.seconds:.1f} s"


def run_history(
    releases: Sequence[KeyInputs],
    compute: Callable[[str, Path], None],
    *,
    results: Path,
    cache: Path,
    scratch: Path,
    committed: Path | None = None,
    record: bool = False,
    fresh: bool = False,
    recheck: frozenset[str] = frozenset(),
    say: Callable[[str], None] = print,
) -> list[Outcome]:
    """Each release's results into ``results/<v>/``: reused from ``cache`` or ``committed`` (the kit's committed
    archive, where its entry's key is this one), or computed by ``compute(v, dir)`` and cached.

    ``record``: the archive ends holding each release's entry for its key (``publish``: the kit commits what made
    its matrix); it is rewritten only where that changes it.
    ``fresh``: compute every release. ``recheck``: compute these even if cached, and report where they differ
    from the cached copy (which is then kept, not replaced: which side is wrong is for a person to find out).
    A computation that raises stores nothing; one that writes no file (``nox --install-only``) neither, nor one
    in which a vLLM child timed out (``timed_out``). A line says when a release's computation starts; after each
    release, a line says what was done and how long it took, and one how far the history is (``progress``).
    """
    outcomes = []
    began = time.perf_counter()
    shelf = read_committed(committed) if committed is not None else {}
    unpacking = scratch / ".committed"

    def committed_copy(r: KeyInputs) -> Path | None:
        files = shelf.get(r.version)
        return unpacked(files, unpacking / r.version, r.key) if files else None

    in_cache = [cached_entry(cache / r.version / r.key) for r in releases]
    in_archive = [committed_copy(r) for r in releases]
    cached = [c or a for c, a in zip(in_cache, in_archive, strict=True)]
    reuse = [
        entry is not None and not fresh and r.version not in recheck for r, entry in zip(releases, cached, strict=True)
    ]
    computed: list[float] = []
    changed = False
    for index, inputs in enumerate(releases):
        started = time.perf_counter()
        version, key = inputs.version, inputs.key
        entry, found = cache / version / key, cached[index]
        source = "committed" if found is not None and found != entry else "cache"
        if reuse[index] and found is not None:
            place(found, results / version)
            outcome = Outcome(version, key, "reused", time.perf_counter() - started, source=source)
        else:
            # A computation takes a minute or more: say which release it is on before it starts.
            doing = "computing"
            if found is not None and version in recheck:
                doing = f"recomputing to check {'its committed copy' if source == 'committed' else 'its cached copy'}"
            say(f"vLLM {version}: {doing} (key {key}), {index + 1} of {len(releases)} releases")
            where = scratch / version
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            compute(version, where)
            differences: tuple[str, ...] = ()
            if not result_files(where):
                action = "computed nothing"
            elif timed_out(where):
                action = "computed, not stored: a vLLM child timed out"
            elif found is not None and version in recheck:
                action, differences = "recomputed", result_differences(found, where)
            else:
                action = "computed"
            if action == "computed":  # a checked copy stays as it was: same, or for a person to look at
                store(entry, where, inputs)
                found = entry
            if action != "computed nothing":
                place(where, results / version)
            outcome = Outcome(version, key, action, time.perf_counter() - started, differences, source)
            computed.append(outcome.seconds)
        if record and found is not None and in_archive[index] is None:
            shelf[version] = entry_files(found)
            changed = True
        say(outcome.line())
        outcomes.append(outcome)
        still = sum(not reused for reused in reuse[index + 1 :])
        say(progress(index + 1, len(releases), time.perf_counter() - began, still, computed))
    if changed and committed is not None:
        write_committed(committed, shelf)
    shutil.rmtree(unpacking, ignore_errors=True)
    return outcomes
