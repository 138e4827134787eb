"""files.py: a result file written whole."""

from __future__ import annotations

import os

import pytest

from radixflow.files import write_whole


def test_the_new_file_replaces_the_old_one_keeping_its_permissions(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_whole(path, "new\n")
    assert path.read_text() == "new\n" and (path.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):  # fails part way, as a full disk would
        write_whole(path, "new" + "\ud800")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_symlink_keeps_pointing_at_the_file_it_names_and_a_device_is_written_in_place(tmp_path):
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    write_whole(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    write_whole(os.devnull, "nothing")  # not replaced by a regular file
    assert not os.path.isfile(os.devnull)
