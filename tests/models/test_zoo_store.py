"""The zoo's builds on disk (`BuildStore`), with builds that write a file: no model, no torch."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from radixflow.models.zoo_store import Build, BuildStore

A, B = "a" * 64, "b" * 64  # the digests of two radixflow versions' builds of one name


def writing(text: str) -> Build:
    def build(out: Path) -> dict[str, Any]:
        (out / "weights").write_text(text)
        return {}

    return build


def test_a_place_another_version_took_while_this_one_waited_for_the_lock_is_kept(tmp_path, monkeypatch):
    """Two versions start on an empty cache at once: both see ``<root>/m`` free, one builds it
    while the other waits for the lock. The second built over the first's (its process loading
    the files that were removed under it); it goes beside it, as when it came later."""
    store = BuildStore(tmp_path, "test", ("m",))
    real_lock, other_done = BuildStore._lock, []

    def lock_once_the_other_built(self: BuildStore, wait: bool = True) -> AbstractContextManager[bool]:
        if not other_done:  # the other version got the lock first, and built where both looked
            other_done.append(True)
            store.build("m", writing("a"), {}, A)
        return real_lock(self, wait)

    monkeypatch.setattr(BuildStore, "_lock", lock_once_the_other_built)
    path = store.build("m", writing("b"), {}, B)
    assert (tmp_path / "m" / "weights").read_text() == "a"
    assert path == tmp_path / f"m.{B[:12]}" and (path / "weights").read_text() == "b"
    assert store.find("m", A) == tmp_path / "m" and store.find("m", B) == path


def test_a_record_nested_past_json_recursion_is_unreadable_not_a_traceback(tmp_path):
    # json.loads raises RecursionError (not ValueError) on a deeply nested document: a garbled
    # record of a build was a traceback where any other unreadable record is a reason to rebuild
    from radixflow.models.zoo_record import RECORD, read_record, record_problem

    (tmp_path / RECORD).write_text("[" * 100_000 + "]" * 100_000)
    assert read_record(tmp_path) == {}
    assert record_problem(tmp_path) == f"its {RECORD} cannot be read (nested too deeply)"
