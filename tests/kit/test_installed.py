"""``matrix.host.facts.installed``: a distribution as importlib.metadata finds and reads it, without importing it.

The doctor reads the installed torch and vLLM on a bare Python, and importlib.metadata (with email, zipfile and csv)
would cost it a third of its own start: so the kit reads their metadata folders itself, and these tests hold that
reading equal to importlib.metadata's, for every package this Python has and for folders made to be awkward.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from matrix.host.facts import installed

METADATA = """\
Metadata-Version: 2.1
Name: Foo.Bar
Version: {version}
License: A licence of two paragraphs,
        the second after a line of white space alone
        \n\
        ends here.
Requires-Dist: torch==2.13.0
Requires-Dist: pytest ; extra == 'test'

Version: 9.9.9 (the description, after the headers, says what it likes)
"""


def read_as_importlib_does(found: metadata.Distribution | None, name: str) -> tuple:
    assert found is not None, name
    return found.version, list(found.requires or []), found.locate_file("x"), found.read_text("direct_url.json")


def read_as_the_kit_does(name: str, path: list[str] | None = None) -> tuple:
    found = installed(name, path)
    assert found is not None, name
    return found.version, list(found.requires), found.locate_file("x"), found.read_text("direct_url.json")


def test_every_distribution_installed_here_reads_as_importlib_metadata_reads_it():
    names = {dist.metadata["Name"] for dist in metadata.distributions()}
    assert {"torch", "pytest"} <= {name.lower() for name in names}
    for name in sorted(names):
        assert read_as_the_kit_does(name) == read_as_importlib_does(metadata.distribution(name), name)
    assert installed("no-such-distribution-here") is None


def test_the_first_folder_on_the_path_by_the_normalized_name_is_the_one_read(tmp_path):
    wheel, egg = tmp_path / "wheel", tmp_path / "egg"
    (wheel / "Foo.Bar-1.0.dist-info").mkdir(parents=True)
    (wheel / "Foo.Bar-1.0.dist-info" / "METADATA").write_text(METADATA.format(version="1.0"))
    (wheel / "Foo.Bar-1.0.dist-info" / "direct_url.json").write_text('{"url": "file:///somewhere/foo"}')
    (egg / "foo_bar-2.0.egg-info").mkdir(parents=True)
    (egg / "foo_bar-2.0.egg-info" / "PKG-INFO").write_text(METADATA.format(version="2.0"))
    for path in ([str(wheel), str(egg)], [str(egg), str(wheel)], [str(tmp_path / "absent"), str(egg)]):
        for name in ("foo-bar", "FOO_BAR", "foo.bar"):
            theirs = next(iter(metadata.distributions(name=name, path=path)), None)
            assert read_as_the_kit_does(name, path) == read_as_importlib_does(theirs, name)
    assert read_as_the_kit_does("foo-bar", [str(wheel)])[:2] == ("1.0", ["torch==2.13.0", "pytest ; extra == 'test'"])
    assert installed("foo-bar", [str(tmp_path / "absent")]) is None
    assert installed("foo", [str(wheel)]) is None
    assert Path(read_as_the_kit_does("foo-bar", [str(egg)])[2]) == egg / "x"
