"""partial_lines.py: JSON Lines that replace their file only once complete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import radixflow
from radixflow.partial_lines import (
    KeptLines,
    PartialHeld,
    PartialLines,
    PartialLock,
    kept_lines,
    record_path,
    recorded,
)


def test_partial_lines_replace_the_old_file_only_when_the_block_ends(tmp_path):
    """`score --input` and `run-batch` truncated their --output as they started, so a Ctrl-C or a
    failure lost the previous results; now the rows go to OUT.partial, renamed over OUT at the end."""
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    (tmp_path / "out.jsonl.partial").write_text("left by an earlier run\n")
    with PartialLines(path) as out:
        out.write("a\n")
        out.flush()
        assert path.read_text() == "old\n" and (tmp_path / "out.jsonl.partial").read_text() == "a\n"
        out.write("b\n")
    assert path.read_text() == "a\nb\n" and (path.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_partial_lines_cut_short_leave_the_old_file_and_say_where_the_rows_are(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    with pytest.raises(KeyboardInterrupt) as caught, PartialLines(path) as out:
        out.write("a\nb\n")
        out.flush()
        out.write("c\n")  # gathered, not flushed: flushed as the file closes
        raise KeyboardInterrupt
    partial = tmp_path / "out.jsonl.partial"
    assert path.read_text() == "old\n" and partial.read_text() == "a\nb\nc\n"
    assert caught.value.__notes__ == [f"the 3 rows written so far are in {partial}"]


def test_a_ctrl_c_once_the_rows_are_in_place_says_they_all_are(tmp_path, monkeypatch):
    """A Ctrl-C that came once the finished file was renamed over OUT (as the rename was synced)
    said the rows were in OUT.partial, a file no longer there, so the run looked cut short and
    the same command ran every line again; now the note says OUT holds every row."""
    from radixflow import files

    path, fsync_path = tmp_path / "out.jsonl", files.fsync_path

    def interrupted_at_the_rename(where):
        if where.is_dir():
            raise KeyboardInterrupt
        fsync_path(where)

    monkeypatch.setattr(files, "fsync_path", interrupted_at_the_rename)
    with pytest.raises(KeyboardInterrupt) as caught, PartialLines(path) as out:
        out.write("a\nb\n")
    assert path.read_text() == "a\nb\n" and not (tmp_path / "out.jsonl.partial").exists()
    assert caught.value.__notes__ == [f"the run had ended: all 2 rows are in {path}"]


def test_partial_lines_cut_short_before_any_row_leave_no_partial_file(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt) as caught, PartialLines(path):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == [] and not hasattr(caught.value, "__notes__")


def test_partial_lines_through_a_symlink_replace_its_target(tmp_path):
    target, link = tmp_path / "target.jsonl", tmp_path / "link.jsonl"
    target.write_text("old\n")
    link.symlink_to(target)
    with PartialLines(link) as out:
        out.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"


def test_partial_lines_given_kept_lines_go_on_after_them_and_drop_a_torn_last_line(tmp_path):
    """A partial file was always made fresh, so running the command again threw away the rows
    an interrupted run had finished; now the kept whole lines stay and the rows go on after
    them, and a last line the run was killed while writing is cut off (its row runs again)."""
    path, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    path.write_text("old\n")
    partial.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    kept = kept_lines(partial)
    assert kept == KeptLines(['{"a": 1}', '{"b": 2}'], len(b'{"a": 1}\n{"b": 2}\n'), torn=True)
    with pytest.raises(KeyboardInterrupt) as caught, PartialLines(path, keep=kept) as out:
        out.write('{"c": 3}\n')
        raise KeyboardInterrupt
    assert partial.read_text() == '{"a": 1}\n{"b": 2}\n{"c": 3}\n' and path.read_text() == "old\n"
    assert caught.value.__notes__ == [f"the 3 rows written so far are in {partial}"]
    with PartialLines(path, keep=kept_lines(partial)) as out:
        out.write('{"d": 4}\n')
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n{"c": 3}\n{"d": 4}\n' and not partial.exists()
    partial.write_text("whole\n")
    assert kept_lines(partial) == KeptLines(["whole"], 6, torn=False)


def test_partial_lines_record_what_their_rows_are_computed_under_while_they_are_kept(tmp_path):
    # nothing said what an interrupted run's rows were computed under, so a run that went on
    # from them under another model or input mixed two settings' rows in one output
    path, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    meta = record_path(partial)
    with pytest.raises(KeyboardInterrupt), PartialLines(path, record="settings A") as out:
        out.write("row\n")
        out.flush()
        raise KeyboardInterrupt
    assert recorded(partial) == "settings A" and meta.name == "out.jsonl.partial.meta"
    with pytest.raises(KeyboardInterrupt), PartialLines(path, record="settings B"):
        raise KeyboardInterrupt  # made fresh, cut short before a row: nothing is left
    assert not partial.exists() and recorded(partial) is None
    with PartialLines(path, record="settings C") as out:
        out.write("row\n")
    assert path.read_text() == "row\n" and not partial.exists() and not meta.exists()


def test_going_on_under_the_same_record_leaves_the_record_as_it_was(tmp_path, monkeypatch):
    """Going on from a partial file wrote its record anew, the file emptied as it was opened: a
    full disk then (the disk that cut the run short still full) or a kill left the kept rows
    beside an empty record, which every later run refused ('not recorded'), so they went with
    --restart. A record that says what the run computes under already is now left as it is."""
    import errno

    from radixflow import partial_lines

    path, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    with pytest.raises(KeyboardInterrupt), PartialLines(path, record="settings A") as out:
        out.write("row\n")
        out.flush()
        raise KeyboardInterrupt

    def full_disk(file, mode="r", *args, **kwargs):
        if "w" in mode:  # emptied as it is opened, then nothing fits
            open(file, mode, *args, **kwargs).close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(partial_lines, "open", full_disk, raising=False)
    with (
        pytest.raises((OSError, KeyboardInterrupt)),
        PartialLines(path, kept_lines(partial), record="settings A"),
    ):
        raise KeyboardInterrupt
    assert recorded(partial) == "settings A" and partial.read_text() == "row\n"


def test_partial_lines_given_kept_lines_that_drop_some_write_the_rest_anew(tmp_path):
    # a batch answer of a server error is dropped on going on, and its line posted again
    path, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    partial.write_bytes(b'{"a": 500}\n{"b": 200}\n{"c": ')
    kept = kept_lines(partial).only([False, True])
    assert kept == KeptLines(['{"b": 200}'], len(b'{"b": 200}\n'), torn=True, in_file=False)
    with PartialLines(path, keep=kept) as out:
        out.write('{"a": 200}\n')
    assert path.read_text() == '{"b": 200}\n{"a": 200}\n' and not partial.exists()


def test_a_partial_file_is_held_by_one_run_at_a_time_and_a_killed_holder_holds_nothing(tmp_path):
    """Two runs writing one output shared one partial file (each read the other's rows, then
    both wrote after them, and the first to end renamed it away from the second); now a run
    holds it locked, a second is refused, and a holder killed by SIGKILL leaves no lock."""
    partial = tmp_path / "out.jsonl.partial"
    with PartialLock(partial), pytest.raises(PartialHeld), PartialLock(partial):
        pass
    assert not record_path(partial).exists()  # made by the lock, no partial file came of it
    holder = (
        "import sys, pathlib; from radixflow.partial_lines import PartialLock\n"
        f"PartialLock(pathlib.Path({str(partial)!r})).__enter__()\n"
        "print('held', flush=True); sys.stdin.read()"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(radixflow.__file__).parents[1])}
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    proc = subprocess.Popen([sys.executable, "-c", holder], env=env, **pipes)
    try:
        assert proc.stdout.readline() == b"held\n"
        with pytest.raises(PartialHeld), PartialLock(partial):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert record_path(partial).exists()  # the killed run's file is left: it locks nothing
    with PartialLock(partial):
        pass


def test_a_record_path_that_is_a_broken_link_is_an_error_not_a_loop(tmp_path, monkeypatch):
    """A broken symbolic link where the record goes (its target removed) could neither be made
    (it exists) nor opened (what it names does not): the lock tried both forever, and run-batch
    or score --input hung at full CPU before a line was read. Now it is an OSError saying so."""
    partial = tmp_path / "out.jsonl.partial"
    record_path(partial).symlink_to(tmp_path / "gone" / "meta")
    opened, open_ = [], os.open

    def counted(*args, **kwargs):  # the loop, bounded: it failed here, where it hung
        opened.append(args[0])
        assert len(opened) < 100, "the record's path was opened over and over"
        return open_(*args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    with pytest.raises(OSError, match="a broken symbolic link"), PartialLock(partial):
        pass
    assert record_path(partial).is_symlink()  # the user's link is theirs: left as it was
