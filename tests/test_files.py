"""files.py: a result file written whole."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_utils import checkout_env

from radixflow.files import WholeLineFile, write_whole, written_in_place
from radixflow.partial_lines import PartialLines


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


@pytest.mark.parametrize("name", ["r" * 245 + ".json", "é" * 120 + ".json", "r." + "j" * 250])
def test_a_file_whose_name_is_near_the_limit_is_written_whole(tmp_path, name):
    # the temporary file beside it (".NAME.PID.tmp.json") was past the 255 bytes a name may hold:
    # "File name too long" once the run was done (`bench --json`, minutes of `calibrate`), though
    # the name itself had passed the up-front check
    path = tmp_path / name
    write_whole(path, "new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == [name]


def test_a_symlink_keeps_pointing_at_the_file_it_names_and_a_device_is_written_in_place(tmp_path):
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    write_whole(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    write_whole(os.devnull, "nothing")  # not replaced by a regular file
    assert not os.path.isfile(os.devnull)


def test_a_file_behind_a_descriptor_is_appended_to_not_replaced(tmp_path):
    """`bench --json /dev/stdout >> all.txt` replaced all.txt by a new file holding the JSON alone:
    what it held, and the table bench printed before the JSON, were lost. The file the shell
    opened is now written in place, after what it holds."""
    path = tmp_path / "all.txt"
    path.write_text("earlier\n")
    inode = path.stat().st_ino
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"table\n")
        write_whole(f"/dev/fd/{fd}", "{}\n")
    finally:
        os.close(fd)
    assert path.read_text() == "earlier\ntable\n{}\n" and path.stat().st_ino == inode


# a child process whose files cannot grow past 500 bytes (EFBIG, as a full disk gives ENOSPC)
PART_WAY = """
import resource, signal, sys
from radixflow.files import WholeLineFile
resource.setrlimit(resource.RLIMIT_FSIZE, (500, 500))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
with WholeLineFile(sys.argv[1]) as out:
    out.write("x" * 299 + "\\n")
    out.flush()
    try:
        for _ in range(3):
            out.write("y" * 99 + "\\n")
        out.flush()  # 300 more bytes: only 200 fit
    except OSError as e:
        print(e.errno)
"""


def test_whole_line_file_cuts_a_write_that_fails_part_way_back_to_its_last_whole_line(tmp_path):
    """A full disk mid-line left `score --input`'s and `run-batch`'s output ending in half a
    JSON line; now the file ends at the last line written whole."""
    path = tmp_path / "out.jsonl"
    env = checkout_env()
    done = subprocess.run(
        [sys.executable, "-c", PART_WAY, str(path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and done.stdout.strip() == str(errno.EFBIG), done.stderr
    assert path.read_text() == "x" * 299 + "\n"


class _HalfThenInterrupted:
    """A file whose first write takes half the bytes (as one a signal interrupts part way
    returns) and whose second is cut short by a Ctrl-C."""

    def __init__(self, file) -> None:
        self.file, self.writes = file, 0

    def write(self, data):
        self.writes += 1
        if self.writes == 2:
            raise KeyboardInterrupt
        return self.file.write(data[: len(data) // 2])

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_whole_line_file_cuts_a_flush_a_ctrl_c_stops_part_way_back_to_its_last_whole_line(tmp_path):
    """Only an OSError cut a flush back, so a Ctrl-C (or SIGTERM) that landed between two writes
    of one flush left half a row at the end of OUT.partial, counted nowhere; now the file ends
    at the last whole line whatever stops the flush."""
    path = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt), WholeLineFile(path) as out:
        out.write("a\n")
        out.flush()
        out._file = _HalfThenInterrupted(out._file)
        out.write("b" * 99 + "\n")
        out.flush()
    assert path.read_text() == "a\n" and out.lines == 1


def test_whole_line_file_on_a_device_or_a_pipe_reports_the_write_error(tmp_path):
    with pytest.raises(OSError, match="No space left"), WholeLineFile("/dev/full") as out:
        out.write("line\n")
    read, write = os.pipe()
    with WholeLineFile(f"/dev/fd/{write}") as out:  # not seekable: written as it comes
        out.write("line\n")
    os.close(write)
    assert os.read(read, 100) == b"line\n"
    os.close(read)


def test_devices_and_pipes_are_written_in_place(tmp_path):
    assert written_in_place(Path("/dev/stdout")) and written_in_place(Path(os.devnull))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert written_in_place(fifo)
    assert not written_in_place(tmp_path / "new.jsonl")
    (tmp_path / "old.jsonl").write_text("")
    assert not written_in_place(tmp_path / "old.jsonl")


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm")
def test_a_regular_file_under_dev_is_replaced_not_appended_to(tmp_path):
    """``--output /dev/shm/scores.jsonl`` (a RAM disk, a regular file) was taken for a device and
    appended to, so a second run's rows followed the first's; only a path that leads to a file
    descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) or is not a regular file is in place."""
    path = Path(f"/dev/shm/radixflow-test-{os.getpid()}.jsonl")
    try:
        path.write_text("old\n")
        assert not written_in_place(path)
        link = tmp_path / "stdout"
        link.symlink_to("/dev/stdout")
        assert written_in_place(link) and written_in_place(Path("/proc/self/fd/1"))
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EXDEV])
def test_a_target_that_cannot_be_renamed_over_is_written_in_place(tmp_path, monkeypatch, code):
    """A bind-mounted file (``docker -v $PWD/out.json:/out.json``) cannot be renamed over (EBUSY; a
    target on another filesystem than its temporary file: EXDEV): the run's whole result was then
    lost for a one-line error at its end. The finished file is now copied into it in place."""
    import radixflow.files as files

    def refuse(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files.os, "replace", refuse)
    path = tmp_path / "r.json"
    path.write_text("old old old\n")
    write_whole(path, "new\n")
    assert path.read_text() == "new\n"
    with PartialLines(tmp_path / "rows.jsonl") as out:
        out.write("row\n")
    assert (tmp_path / "rows.jsonl").read_text() == "row\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "rows.jsonl"]


def test_a_finished_file_is_on_disk_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    """The rename that puts a result in place was not preceded by an fsync, so a power cut soon
    after could leave OUT renamed but empty or short (the data still in the page cache), where
    the old file should have been; now the data is synced first, and the directory after."""
    import radixflow.files as files

    events: list[str] = []
    fsync, replace = os.fsync, files.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: (events.append(f"sync {os.readlink(f'/proc/self/fd/{fd}')}"), fsync(fd))[1]
    )
    monkeypatch.setattr(
        files,
        "replace",
        lambda done, target: (events.append(f"rename {done.name}"), replace(done, target))[1],
    )
    path = tmp_path / "out.jsonl"
    with PartialLines(path) as out:
        out.write("row\n")
    assert events[:3] == [
        f"sync {tmp_path}/out.jsonl.partial",
        "rename out.jsonl.partial",
        f"sync {tmp_path}",
    ]
    events.clear()
    write_whole(tmp_path / "r.json", "{}")
    assert events[0].startswith(f"sync {tmp_path}/.r.") and events[1].startswith("rename .r.")
    assert events[2] == f"sync {tmp_path}"
