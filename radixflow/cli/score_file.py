"""`radixflow score --input FILE`: many contexts, each with its own candidates, from a JSONL file.

One line per context, each line's shape checked before anything runs (`score_lines`); contexts
run ``CONTEXTS_PER_CALL`` at a time through `LLM.score_many` (one batch each, the cache kept
across them), and each context's line of results is written as soon as its candidates are scored
(in the file's order: one that finishes early waits for the lines before it), so a run cut short
keeps what it finished. Each line is read once (`LLM.scoring_tokens`, before its batch) and runs
as the token ids that gives; a line whose context or candidates the model refuses gets an error
line in its place, ``{"id", "line", "error": {"line", "message"}}``, and the others are scored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any

from radixflow.cli.score_lines import ScoreJob
from radixflow.problems import counted
from radixflow.server.responses.logprobs import finite_logprob

if TYPE_CHECKING:
    from radixflow.generation.scoring import CandidateScore

# Contexts per `score_many` call: enough for the scheduler to fill rounds across contexts, few
# enough that a file of any length holds only this many contexts' requests at a time.
CONTEXTS_PER_CALL = 64


def left_to_run(jobs: list[ScoreJob], rows: list[dict[str, Any]]) -> list[ScoreJob]:
    """The jobs that ``rows`` (an earlier run's output lines, which it wrote in file order) do not
    answer; ValueError naming the first row that is not the line of ``jobs`` it stands for (one
    of another input, or of an input since edited)."""
    if len(rows) > len(jobs):
        raise ValueError(f"it holds {counted(len(rows), 'row')}, more than --input's {len(jobs)} lines")
    for n, (row, job) in enumerate(zip(rows, jobs[: len(rows)], strict=True), 1):
        # compared as written: 1.0 == True == 1 as Python values, not as the ids the file gave
        same = json.dumps([row.get("line"), row.get("id")]) == json.dumps([job.line, job.id])
        if not same or not {"scores", "error"} & set(row):
            given = f"line {row.get('line')!r}, id {row.get('id')!r}"
            raise ValueError(f"row {n} ({given}) is not --input's line {job.line} (id {job.id!r})")
        if "scores" in row and _candidates(row["scores"]) != job.candidates:  # the line edited since
            raise ValueError(f"row {n}'s candidates are not those of --input's line {job.line}")
    return jobs[len(rows) :]


def _candidates(scores: Any) -> list[Any] | None:
    """The candidates of an output row's scores, in order (None: not a list of scores)."""
    if not isinstance(scores, list) or not all(isinstance(s, dict) for s in scores):
        return None
    return [s.get("candidate") for s in scores]


def score_rows(job: ScoreJob, scores: list[CandidateScore]) -> dict[str, Any]:
    """One output line: the job's id and line, and each candidate's scores in the given order."""
    rows = [score_row(job.candidates[s.index], s) for s in scores]
    return {"id": job.id, "line": job.line, "scores": rows}


def error_row(job: ScoreJob, message: str) -> dict[str, Any]:
    """The output line of a job the model refused: its id and line, and why."""
    return {"id": job.id, "line": job.line, "error": {"line": job.line, "message": message}}


def score_row(candidate: Any, s: CandidateScore) -> dict[str, Any]:
    """One candidate's figures as JSON-ready data (`--json` and `--input` write the same); a
    logprob JSON cannot hold (-inf, NaN) is the stand-in /v1/score answers, -9999 (Python's
    -Infinity and NaN are no JSON: a strict reader refused the whole line)."""
    logprobs = [finite_logprob(lp) for lp in s.logprobs]
    figures = {"total": finite_logprob(s.total), "mean": finite_logprob(s.mean), "greedy": s.greedy}
    return {"candidate": candidate, **asdict(s), "logprobs": logprobs, **figures}


def chunks(jobs: list[ScoreJob], size: int | None = None) -> Iterator[list[ScoreJob]]:
    """``jobs`` ``size`` at a time (default: `CONTEXTS_PER_CALL`, read when called)."""
    size = size or CONTEXTS_PER_CALL
    for start in range(0, len(jobs), size):
        yield jobs[start : start + size]


@dataclass
class ScoreTally:
    """What a run scored: contexts, candidates, and the candidates' prompt tokens in all and
    from the cache (a context is computed once; its later candidates find it there)."""

    contexts: int = 0
    candidates: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    failed: int = 0  # lines refused, each an error line in the output

    def add(self, scores: list[CandidateScore]) -> None:
        self.contexts += 1
        self.candidates += len(scores)
        self.prompt_tokens += sum(s.prompt_tokens for s in scores)
        self.cached_tokens += sum(s.cached_tokens for s in scores)

    def line(self) -> str:
        share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        failed = f", {counted(self.failed, 'line')} failed" if self.failed else ""
        return (
            f"{counted(self.contexts, 'context')}, {counted(self.candidates, 'candidate')} scored{failed}; "
            f"{self.cached_tokens} of {self.prompt_tokens} prompt tokens from the cache ({share:.0%})"
        )


def run_jobs(
    jobs: list[ScoreJob],
    score_many: Callable[..., list[list[CandidateScore]]],
    tokens: Callable[..., tuple[list[int], list[list[int]]]],
    out: IO[str],
    progress: Callable[[int, int], None],
) -> ScoreTally:
    """Score ``jobs`` chunk by chunk with ``score_many`` (`LLM.score_many`), writing a line per
    job to ``out``, in order, as each job's context finishes (one that finishes before an earlier
    line's waits for it), so a run cut short keeps every line it could. Each job is read once, by
    ``tokens`` (`LLM.scoring_tokens`), and runs as the token ids it gives; one it refuses (its
    ValueError) is not scored but written as an error line. ``progress`` hears (candidates done,
    candidates)."""
    total, done, tally = sum(len(j.candidates) for j in jobs), 0, ScoreTally()
    for chunk in chunks(jobs):
        rows = _InOrder(chunk, out, tally)
        runs = [(job, ids) for job in chunk if (ids := _read(tokens, job, rows)) is not None]
        if runs:  # a chunk of refused lines only has nothing to run
            score_many(
                [ctx for _, (ctx, _) in runs],
                [cands for _, (_, cands) in runs],
                progress=lambda n, _, base=done: progress(base + n, total),
                on_context=lambda i, scores, runs=runs, rows=rows: rows.scored(runs[i][0], scores),
            )
        assert rows.all_written(), "score_many heard every context it returned"
        done += sum(len(j.candidates) for j in chunk)
        progress(done, total)
    return tally


def _read(
    tokens: Callable[..., tuple[list[int], list[list[int]]]], job: ScoreJob, rows: _InOrder
) -> tuple[list[int], list[list[int]]] | None:
    """``job``'s context and candidates as token ids (`LLM.scoring_tokens`), or None once its
    refusal is ``rows``' error line."""
    try:
        return tokens(job.context, job.candidates, add_special_tokens=job.add_special_tokens)
    except ValueError as e:
        rows.refused(job, str(e))
        return None


class _InOrder:
    """One chunk's output lines, written in the chunk's order as they come."""

    def __init__(self, chunk: list[ScoreJob], out: IO[str], tally: ScoreTally) -> None:
        self._chunk, self._out, self._tally = chunk, out, tally
        self._ready: dict[int, str] = {}  # line number -> its row, not yet written
        self._next = 0  # the chunk's first job not yet written

    def refused(self, job: ScoreJob, why: str) -> None:
        self._tally.failed += 1
        self._add(job, error_row(job, why))

    def scored(self, job: ScoreJob, scores: list[CandidateScore]) -> None:
        self._tally.add(scores)
        self._add(job, score_rows(job, scores))

    def all_written(self) -> bool:
        return self._next == len(self._chunk)

    def _add(self, job: ScoreJob, row: dict[str, Any]) -> None:
        self._ready[job.line] = json.dumps(row) + "\n"
        written = self._next
        while self._next < len(self._chunk) and self._chunk[self._next].line in self._ready:
            self._out.write(self._ready.pop(self._chunk[self._next].line))
            self._next += 1
        if self._next > written:
            self._out.flush()
