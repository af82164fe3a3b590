"""Result files are written where a link may wait: the link is replaced, never written through."""

from __future__ import annotations

import pytest

from matrix.errors import MatrixError
from matrix.io.files import write_file


def test_a_link_at_the_name_is_replaced_and_what_it_points_at_is_untouched(tmp_path):
    canary = tmp_path / "authorized_keys"
    canary.write_text("the owner's key\n")
    out = tmp_path / "results"
    out.mkdir()
    (out / "cell.xml").symlink_to(canary)
    written = write_file(out, "cell.xml", b"<testsuites/>")
    assert canary.read_text() == "the owner's key\n"
    assert not written.is_symlink() and written.read_bytes() == b"<testsuites/>"
    assert sorted(p.name for p in out.iterdir()) == ["cell.xml"]  # no partial file left behind


def test_a_directory_that_is_a_link_is_refused_in_one_line(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "results").symlink_to(elsewhere)
    with pytest.raises(
        MatrixError, match=r"results is a symbolic link: results are written only into a real directory"
    ):
        write_file(tmp_path / "results", "cell.xml", b"<testsuites/>")
    assert list(elsewhere.iterdir()) == []


def test_a_missing_directory_is_made(tmp_path):
    assert write_file(tmp_path / "a" / "b", "x.json", b"{}").read_bytes() == b"{}"
