"""`python -m matrix releases`: the package index's vLLM releases against the published matrix, through the real pip
asking a package index of the test's own on loopback."""

from __future__ import annotations

import json

from package_index import covered, refusing_url, run_releases, served, write_index

from matrix.store.release_index import FIRST, final

# Beside the covered releases: one that counts, and what never does (a pre-release, a dev release, a local
# version, one older than the matrix's first release).
NOT_RELEASES = ("99.2.0rc1", "99.2.0.dev1", "99.3.0+cu128", "0.22.1")


def releases(tmp_path, versions, *args):
    with served(tmp_path / "index") as url:
        write_index(tmp_path / "index", versions)
        return run_releases(f"{url}/simple/", *args)


def test_a_release_newer_than_the_matrix_is_named_and_nothing_else(tmp_path):
    done = releases(tmp_path, [*covered(), "99.1.0", *NOT_RELEASES])
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == "missing: 99.1.0"
    assert lines[3].startswith(f"new: 99.1.0, newer than the newest covered ({covered()[-1]}): ")
    for other in NOT_RELEASES:
        assert other not in done.stdout


def test_as_json_the_workflow_reads_the_new_releases(tmp_path):
    done = releases(tmp_path, [*covered(), "99.1.0", *NOT_RELEASES], "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert found["new"] == found["missing"] == ["99.1.0"]
    assert found["found"] == [*covered(), "99.1.0"]
    assert found["covered"][0] == FIRST and found["newest_covered"] == found["covered"][-1]


def test_with_only_covered_releases_nothing_is_missing(tmp_path):
    done = releases(tmp_path, [*covered(), "99.2.0rc1"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2:] == ["missing: none", f"nothing newer than {covered()[-1]} is missing"]


def test_a_gap_below_the_newest_covered_release_is_missing_but_not_new(tmp_path):
    done = releases(tmp_path, [*covered(), "0.23.1"], "--json")
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["missing"], json.loads(done.stdout)["new"]) == (["0.23.1"], [])


def test_an_index_that_cannot_be_reached_is_one_line_and_exit_2():
    done = run_releases(refusing_url())
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: the package index gave no list of vllm releases (")


def test_post_releases_count_and_pre_dev_and_local_versions_never_do():
    given = ["0.30.0.post1", "0.30.0", "0.31.0rc2", "0.31.0.dev3", "0.31.0+cpu", "0.22.1", "latest", "0.30.0"]
    assert final(given) == ("0.30.0", "0.30.0.post1")
