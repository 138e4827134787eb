"""`radixflow run-batch`: OpenAI batch files through the server's routes, offline."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import radixflow
from radixflow.cli import main
from radixflow.cli.command import ROUND_LEFT
from radixflow.generation import LLM, SamplingParams

MODEL = "qwen3_5-tiny"
AGAIN = " (the same command run again goes on from where it stopped)"  # the note of a run cut short
FLAGS = ["--kv-blocks", "256", "--state-slots", "64"]


def batch_line(custom_id: str, url: str, body: dict, method: str = "POST") -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


def completion(custom_id: str, prompt: str) -> str:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 5, "temperature": 0}  # greedy, as offline
    return batch_line(custom_id, "/v1/completions", body)


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=256, state_slots=64)


def test_every_line_is_answered_as_the_server_and_the_offline_api_answer_it(llm, tmp_path, capsys):
    prompts = [f"Request number {i} asks for a few tokens" for i in range(6)]
    lines = [completion(f"c{i}", p) for i, p in enumerate(prompts)]
    scoring = {"model": MODEL, "context": "Q: yes?\nA:", "candidates": [" yes", " no"]}
    lines.append(batch_line("s", "/v1/score", scoring))
    lines.append(batch_line("bad", "/v1/completions", {"model": "gpt-4o", "prompt": "x"}))
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    lines.append(batch_line("chat", "/v1/chat/completions", chat))
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("\n".join(lines) + "\n\n")
    # a line answered 404: 1, as score --input ends when a line was refused (it ended 0, as when
    # every line was answered, so a script could not tell)
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]) == 1
    assert "9 requests: 8 answered 200, 1 answered 404" in capsys.readouterr().err
    answers = {row["custom_id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert sorted(answers) == sorted(json.loads(line)["custom_id"] for line in lines)
    offline = llm.generate(prompts, SamplingParams(max_tokens=5))
    for i, want in enumerate(offline):
        response = answers[f"c{i}"]["response"]
        assert response["status_code"] == 200 and response["request_id"] == response["body"]["id"]
        assert response["body"]["choices"][0]["text"] == want.text
    scored = answers["s"]["response"]["body"]["data"]
    want_scores = llm.score("Q: yes?\nA:", [" yes", " no"])
    assert [d["total_logprob"] for d in scored] == pytest.approx([s.total for s in want_scores], abs=1e-4)
    refused = answers["bad"]["response"]
    assert refused["status_code"] == 404 and refused["body"]["error"]["param"] == "model"
    assert answers["chat"]["response"]["body"]["object"] == "chat.completion"
    assert all(row["error"] is None and row["id"].startswith("batch_req_") for row in answers.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "line 1: not valid JSON"),
        (batch_line("a", "/v1/completions", {}, method="GET") + "\n", "line 1: method: only POST"),
        (batch_line("a", "/v1/embeddings", {}) + "\n", "line 1: url: one of"),
        (batch_line("", "/v1/score", {}) + "\n", "line 1: custom_id: a non-empty"),
        (batch_line("a", "/v1/score", []) + "\n", "line 1: body: a JSON object"),  # type: ignore[arg-type]
        (
            batch_line("a", "/v1/completions", {"prompt": "x", "stream": True}) + "\n",
            "line 1: body: stream is not supported in a batch",
        ),
        (
            completion("a", "x") + "\n" + batch_line("a", "/v1/score", {}) + "\n",
            "line 2: custom_id 'a' is line 1's too",
        ),
        # the first fault in the file is named: the duplicate was looked for once every line was
        # read, so a bad line after it was named first
        (
            completion("a", "x") + "\n" + completion("a", "y") + "\nnot json\n",
            "line 2: custom_id 'a' is line 1's too",
        ),
        ("\n  \n", "no requests in the file"),
        # Python's JSON parser raised RecursionError: a traceback
        ("[" * 100_000 + "]" * 100_000 + "\n", "line 1: not valid JSON (nested too deeply)"),
    ],
)
def test_a_bad_batch_file_is_one_line_before_anything_runs(zoo, tmp_path, capsys, text, message):
    given = tmp_path / "in.jsonl"
    given.write_text(text)
    assert main(["run-batch", MODEL, "-i", str(given)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert main(["run-batch", MODEL, "-i", str(tmp_path / "missing.jsonl")]) == 2
    assert "--input: cannot read" in capsys.readouterr().err


def test_a_body_nested_as_deep_as_json_reads_is_answered(zoo, tmp_path, capsys):
    """A line nested 600 deep parses; the run's record copied it with dataclasses.asdict, which
    recurses twice per level: a RecursionError traceback before anything ran."""
    deep: Any = "ok"
    for _ in range(600):
        deep = [deep]
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1, "x": deep}  # an undeclared field: ignored
    given.write_text(batch_line("a", "/v1/completions", body) + "\n")
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["response"]["status_code"] == 200
    assert "Traceback" not in capsys.readouterr().err


def test_a_body_json_read_but_too_deep_to_post_is_answered_400():
    """A line nested nearly as deep as json reads (980 from the command line) was read, then
    re-encoded for its post on the worker's deeper stack: a RecursionError traceback ended the
    run where a line a little less deep was answered 400 by the route. Past any stack, here."""
    from radixflow.server.batch import BatchLine, _answer, _Arrivals

    deep: Any = "ok"
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    line = BatchLine(1, "a", "/v1/completions", {"model": MODEL, "x": deep})

    class Unposted:
        async def post(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("a body json cannot write was posted")

    answer = asyncio.run(_answer(Unposted(), line, _Arrivals()))  # type: ignore[arg-type]
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["message"] == "malformed JSON body: nested too deeply"
    assert error["type"] == "invalid_request_error"


def test_a_byte_that_is_not_utf8_is_named_by_its_line(zoo, tmp_path, capsys):
    # it was "cannot read in.jsonl: 'utf-8' codec can't decode byte 0xff in position 164": an
    # offset in the whole file, where every other error names the line
    given = tmp_path / "in.jsonl"
    given.write_bytes(completion("a", "x").encode() + b'\n{"custom_id": "b\xff"}\n')
    assert main(["run-batch", MODEL, "-i", str(given)]) == 2
    err = capsys.readouterr().err
    assert err == f"radixflow: error: --input {given}: line 2: not UTF-8 text (byte 0xff at column 17)\n"


def test_batch_lines_end_at_newlines_only():
    # a JSON string may hold U+2028, U+2029 or U+0085 unescaped: no line ends there
    from radixflow.server.batch import read_batch

    bodies = [{"prompt": "a\u2028b\u2029c\x85d"}, {"prompt": "e"}]
    url = "/v1/completions"
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": url, "body": b} for i, b in enumerate(bodies)]
    text = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)
    lines = read_batch(text + "\n")
    assert [(x.line, x.custom_id, x.body) for x in lines] == [(1, "c0", bodies[0]), (2, "c1", bodies[1])]


def test_an_internal_error_is_a_500_answer_and_the_run_goes_on(zoo, tmp_path, capsys, monkeypatch):
    # `radixflow serve` answers an exception in a route with a 500 in OpenAI's shape; the batch
    # wrote it likewise instead of ending the run with a traceback
    from radixflow.server import score

    prepare = score.prepare

    def failing(body, state):
        if body.context == "boom":
            raise RuntimeError("a bug")
        return prepare(body, state)

    monkeypatch.setattr(score, "prepare", failing)
    bodies = [{"model": MODEL, "context": c, "candidates": [" a"]} for c in ("fine", "boom", "also fine")]
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(batch_line(f"s{i}", "/v1/score", b) + "\n" for i, b in enumerate(bodies)))
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]) == 1
    assert "3 requests: 2 answered 200, 1 answered 500" in capsys.readouterr().err
    answers = {row["custom_id"]: row["response"] for row in map(json.loads, out.read_text().splitlines())}
    assert answers["s1"]["status_code"] == 500
    assert answers["s1"]["body"]["error"]["message"] == "internal server error: RuntimeError"


def test_a_body_is_posted_as_python_reads_it_nan_and_all(zoo, tmp_path, capsys):
    # Python's json reads NaN and 1e400 (inf), and serve answers such a body with a 400; httpx's
    # own encoder refuses them, which ended the run with a traceback (and an abort at exit)
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    nan = '{"custom_id": "nan", "method": "POST", "url": "/v1/completions", "body": {"model": "%s", '
    given.write_text(
        (nan % MODEL)
        + '"prompt": "x", "temperature": NaN}}\n'
        + (nan % MODEL).replace('"nan"', '"inf"')
        + '"prompt": "x", "top_p": 1e400}}\n'
    )
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]) == 1
    assert "2 requests: 2 answered 400" in capsys.readouterr().err
    answers = {row["custom_id"]: row["response"] for row in map(json.loads, out.read_text().splitlines())}
    # 1e400 as typed, as serve quotes it (was "Infinity", as Python writes it back)
    assert answers["nan"]["body"]["error"]["message"] == "temperature: must be a finite number, got NaN"
    assert answers["inf"]["body"]["error"]["message"] == "top_p: must be a finite number, got 1e400"


def test_a_stream_that_is_not_true_is_answered_as_serve_answers_it(zoo, tmp_path, capsys):
    # only stream: true streams; serve answers "false" or an object with a 400 naming stream,
    # which the batch used to refuse as a streamed line, running nothing
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    bodies = [{"model": MODEL, "prompt": "x", "stream": s} for s in ("false", {"on": True})]
    given.write_text("".join(batch_line(f"c{i}", "/v1/completions", b) + "\n" for i, b in enumerate(bodies)))
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]) == 1
    for row in map(json.loads, out.read_text().splitlines()):
        assert row["response"]["status_code"] == 400
        assert row["response"]["body"]["error"]["param"] == "stream"


def test_a_drain_timeout_given_is_warned_about_as_every_flag_that_changes_nothing_is(zoo, tmp_path, capsys):
    # run-batch runs with no drain (a run cut short aborts what is in flight): --drain-timeout 5
    # was taken without a word, where every other flag that cannot change the run draws a warning
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(completion("a", "Hi") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--drain-timeout", "5", *FLAGS]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "radixflow: warning: --drain-timeout has no effect in run-batch" in err, err


def test_run_batch_warns_of_the_cpu_clock_by_the_threads_it_will_run(zoo, tmp_path, capsys, monkeypatch):
    # run-batch runs on the server's thread plan (one torch thread on 2 CPUs), as serve does, but
    # its spin-wait warning was made before the plan: "clock cpu with 2 torch threads" of a run
    # on one thread (serve's counts the plan's)
    import radixflow.cli.run_batch as run_batch_command

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(run_batch_command, "cpu_count", lambda: 2)
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(completion("a", "Hi") + "\n")
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), "--clock", "cpu", *FLAGS]) == 0
    assert "OMP_WAIT_POLICY" not in capsys.readouterr().err
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--restart", "--clock", "cpu", *FLAGS]
    assert main([*argv, "--torch-threads", "2"]) == 0
    assert "clock cpu with 2 torch threads" in capsys.readouterr().err


def test_a_long_body_lane_no_body_can_reach_is_warned_about(zoo, tmp_path, capsys):
    # a body over --long-body-bytes is read in the long lane, one over --max-body-bytes is refused:
    # with the first not below the second no body ever takes the lane, and --long-text-threads 4
    # --long-body-bytes 8000000 (over the 4 MiB limit) changed nothing, silently
    from radixflow.cli.serve_setup import unused_lane
    from radixflow.server.config import ServerConfig

    config = ServerConfig(long_body_bytes=8_000_000)
    words = "no effect: no body is over --long-body-bytes 8000000 and within --max-body-bytes 4MiB"
    assert unused_lane(config, ["long_body_bytes", "long_text_threads"]) == (
        f"--long-body-bytes, --long-text-threads have {words}"
    )
    # a size is said in a unit where one holds it exactly (it said 8388608 of --long-body-bytes 8MiB)
    in_units = unused_lane(ServerConfig(long_body_bytes=8 << 20, max_body_bytes=1536), ["long_body_bytes"])
    assert in_units.endswith("over --long-body-bytes 8MiB and within --max-body-bytes 1.5KiB"), in_units
    assert unused_lane(config, ["max_pending"]) is None  # nothing given of the lane
    assert unused_lane(ServerConfig(long_text_threads=4), ["long_text_threads"]) is None
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(completion("a", "Hi") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--long-body-bytes", "8000000", *FLAGS]
    assert main(argv) == 0
    assert "radixflow: warning: --long-body-bytes has no effect: no body is over" in capsys.readouterr().err


def test_bodies_of_many_requests_wait_for_room_in_the_queue(zoo, tmp_path, capsys):
    # --max-pending counts engine requests (a scoring body's candidates, a completion's n); the
    # batch posted that many bodies at once, so most were answered 429 queue_full
    candidates = [" yes", " no", " maybe"]
    bodies = [{"model": MODEL, "context": f"Q: {i}?\nA:", "candidates": candidates} for i in range(6)]
    lines = [batch_line(f"s{i}", "/v1/score", b) for i, b in enumerate(bodies)]
    twice = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "n": 2, "temperature": 0}
    lines += [batch_line(f"c{i}", "/v1/completions", twice) for i in range(3)]
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("\n".join(lines) + "\n")
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "4", *FLAGS]) == 0
    assert "9 requests: 9 answered 200" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 9


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


def test_a_run_that_fails_stops_the_engine_loop(zoo):
    # the error went through the app's lifespan without its shutdown: the engine thread went on
    # running rounds as the interpreter ended (an abort at exit, status 134)
    from radixflow.generation.setup import load_model
    from radixflow.options import EngineOptions
    from radixflow.server.app import create_app
    from radixflow.server.batch import read_batch, run_batch
    from radixflow.server.config import ServerConfig
    from radixflow.server.serve import server_state

    model = load_model(EngineOptions.from_mapping({"kv_blocks": 256, "state_slots": 64}, model=MODEL))
    state = server_state(model, ServerConfig())
    lines = read_batch("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(6)))
    with pytest.raises(OSError, match="No space left"):
        asyncio.run(run_batch(create_app(state), lines, _FullDisk(), concurrency=3))
    assert state.loop.join(timeout=0) and state.loop.engine.requests == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_one_line(zoo, tmp_path, capsys, monkeypatch):
    given = tmp_path / "in.jsonl"
    given.write_text(completion("a", "x") + "\n")
    assert main(["run-batch", MODEL, "-i", str(given), "-o", "/dev/full", *FLAGS]) == 2
    assert "cannot write --output /dev/full: No space left on device" in capsys.readouterr().err
    # standard output on a full disk (`> out.jsonl`) was an OSError traceback
    monkeypatch.setattr(sys, "stdout", _FullDisk())
    assert main(["run-batch", MODEL, "-i", str(given), *FLAGS]) == 2
    said = "radixflow: error: cannot write --output (standard output): No space left on device\n"
    assert capsys.readouterr().err.endswith(said)


def test_a_trace_the_disk_refuses_is_one_line_and_exit_2_after_the_answers(
    zoo, tmp_path, capsys, monkeypatch
):
    # a log line and exit 0, where bench, generate and score end with one line and exit 2
    import errno

    def no_room(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("radixflow.engine.trace_file.write_whole", no_room)
    given, out, trace = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "t.json"
    given.write_text(completion("a", "x") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]
    assert main([*argv, "--trace-out", str(trace)]) == 2
    said = f"radixflow: error: cannot write --trace-out {trace}: No space left on device"
    assert capsys.readouterr().err.splitlines()[-1] == said
    assert [a[1] for a in _answers(out.read_text())] == [200]  # the answers are written all the same


@pytest.mark.parametrize(
    ("sig", "said", "code"), [(signal.SIGINT, "interrupted", 130), (signal.SIGTERM, "terminated", 143)]
)
def test_a_run_cut_short_keeps_the_old_output_and_says_where_the_answers_are(
    zoo, tmp_path, capsys, monkeypatch, sig, said, code
):
    """run-batch truncated --output as it started, so a Ctrl-C lost the previous results, and a
    SIGTERM ended it with no word; now the answers stream into OUT.partial, renamed over OUT
    only when every line is answered, and a SIGTERM stops it as a Ctrl-C does."""
    from radixflow.server import batch

    written = []

    def signalled(line, status, body):
        written.append(line.custom_id)
        if len(written) == 3:  # two lines written: stopped as the third is
            os.kill(os.getpid(), sig)
        return output_line(line, status, body)

    output_line = batch.output_line
    monkeypatch.setattr(batch, "output_line", signalled)
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or Ray's once a test has started Ray
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(6)))
    out.write_text("the previous answers\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    assert main(argv) == code
    partial = tmp_path / "out.jsonl.partial"
    err = capsys.readouterr().err
    kept = [json.loads(line)["custom_id"] for line in partial.read_text().splitlines()]
    assert kept in (["c0", "c1"], ["c0", "c1", "c2"])  # asyncio stops it at the worker's next await
    where = f"the {len(kept)} rows written so far are in {partial}{AGAIN}"
    assert err.splitlines()[-1] == f"radixflow: {said}; {where}"
    assert out.read_text() == "the previous answers\n"
    monkeypatch.setattr(batch, "output_line", output_line)
    assert main(argv) == 0  # the run that completes replaces the output, and leaves no partial file
    assert len(out.read_text().splitlines()) == 6 and not partial.exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_run_cut_short_says_where_its_trace_is_as_generate_and_score_do(zoo, tmp_path, capsys, monkeypatch):
    # the engine loop writes the trace as it stops, but the line said only where the rows were,
    # where generate, score and bench name the trace too
    from radixflow.server import batch

    written = []

    def signalled(line, status, body):
        written.append(line.custom_id)
        if len(written) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return output_line(line, status, body)

    output_line = batch.output_line
    monkeypatch.setattr(batch, "output_line", signalled)
    given, out, trace = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "t.json"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(4)))
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    assert main([*argv, "--trace-out", str(trace)]) == 130
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.endswith(f"; the trace, down to where the run stopped, is in {trace}"), said
    assert json.loads(trace.read_text())["traceEvents"]


TERMINATED_AT_THE_THIRD_ANSWER = """
import os, signal, sys
from radixflow.cli import main
from radixflow.server import batch

written, output_line = [], batch.output_line

def signalled(line, status, body):
    written.append(line.custom_id)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    return output_line(line, status, body)

batch.output_line = signalled
sys.exit(main(sys.argv[1:]))
"""


def test_a_sigterm_to_a_background_run_is_one_line_not_a_traceback(zoo, tmp_path):
    # started with SIGINT ignored (a background job of a script, nohup), asyncio has no Ctrl-C
    # handler to take the SIGTERM: the interrupt landed in a task, and at exit asyncio logged
    # "Task exception was never retrieved" with a 40-line traceback after the command's line
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(6)))
    root = str(Path(radixflow.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "2", *FLAGS]
    done = subprocess.run(
        [sys.executable, "-c", TERMINATED_AT_THE_THIRD_ANSWER, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN),
    )
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("radixflow: terminated; the ")


def test_the_batch_summary_counts_one_request_in_the_singular():
    # it said "1 requests: 1 answered 200"
    from radixflow.server.batch import BatchTally

    assert BatchTally({200: 1}).line() == "1 request: 1 answered 200"
    assert BatchTally({404: 1, 200: 2}).line() == "3 requests: 2 answered 200, 1 answered 404"
    assert (BatchTally({200: 2}).failed, BatchTally({404: 1, 500: 2, 200: 2}).failed) == (0, 3)


def _count_engine_requests(monkeypatch) -> list[object]:
    from radixflow.engine.engine import Engine

    submitted, submit = [], Engine.submit

    def counted(self, request):
        submitted.append(request)
        return submit(self, request)

    monkeypatch.setattr(Engine, "submit", counted)
    return submitted


def _answers(text: str) -> list[tuple[str, int, list]]:
    """Each output line's custom_id, status and choices (its request id and time differ by run)."""
    rows = [json.loads(line) for line in text.splitlines()]
    return [(r["custom_id"], r["response"]["status_code"], r["response"]["body"]["choices"]) for r in rows]


def test_a_run_cut_short_goes_on_from_its_partial_file_posting_only_the_missing_lines(
    zoo, tmp_path, capsys, monkeypatch
):
    """Running run-batch again after a Ctrl-C made OUT.partial fresh, silently throwing away the
    answers the interrupted run had finished; now it keeps them (first, as they arrived), posts
    only the lines they lack, and says so."""
    from radixflow.server import batch

    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(6)))
    argv = ["run-batch", MODEL, "-i", str(given), "--max-pending", "1", *FLAGS]
    assert main([*argv, "-o", str(whole)]) == 0
    output_line, written = batch.output_line, []

    def interrupted(line, status, body):
        written.append(line.custom_id)
        if len(written) == 3:
            raise KeyboardInterrupt
        return output_line(line, status, body)

    monkeypatch.setattr(batch, "output_line", interrupted)
    assert main([*argv, "-o", str(out)]) == 130
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text()
    assert [row[0] for row in _answers(kept)] == ["c0", "c1"]
    monkeypatch.setattr(batch, "output_line", output_line)
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main([*argv, "-o", str(out)]) == 0
    assert f"radixflow: going on from {partial}: 2 rows kept, 4 lines to run" in capsys.readouterr().err
    assert len(submitted) == 4
    assert out.read_text().startswith(kept) and _answers(out.read_text()) == _answers(whole.read_text())
    assert not partial.exists()


def test_an_engine_that_fails_ends_the_run_and_the_next_goes_on_from_its_answers(
    zoo, tmp_path, capsys, monkeypatch
):
    """An engine that failed mid-run (a bug, a device error: its state unknown) had every line
    left answered 503 within moments, and the run counted as complete: OUT replaced by a file
    of those answers (exit 1), so the same command started over and computed every answer
    again. Now the run stops there, as a run cut short by a failure does: OUT is left as it
    was, one line says the failure and where the answers are, and the same command goes on
    from them, posting the failed line again."""
    from radixflow.server import batch, dispatch

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(6)))
    out.write_text("old\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    output_line, written, step = batch.output_line, [], dispatch.Dispatch.step

    def counted(line, status, body):
        written.append(line.custom_id)
        return output_line(line, status, body)

    def failing(self):
        if len(written) == 2:  # one line at a time: the third line's first round
            raise RuntimeError("device lost")
        step(self)

    with monkeypatch.context() as patched:
        patched.setattr(batch, "output_line", counted)
        patched.setattr(dispatch.Dispatch, "step", failing)
        assert main(argv) == 1
    partial = tmp_path / "out.jsonl.partial"
    said = "radixflow: error: the engine failed: RuntimeError: device lost; the 3 rows written so far"
    assert capsys.readouterr().err.splitlines()[-1] == f"{said} are in {partial}{AGAIN}"
    assert out.read_text() == "old\n"
    rows = [json.loads(line) for line in partial.read_text().splitlines()]
    statuses = [(r["custom_id"], r["response"]["status_code"]) for r in rows]
    assert statuses == [("c0", 200), ("c1", 200), ("c2", 500)]
    submitted = _count_engine_requests(monkeypatch)
    assert main(argv) == 0
    said = f"going on from {partial}: 2 rows kept, 1 answer of a server error (5xx) dropped, 4 lines to run"
    assert said in capsys.readouterr().err
    assert len(submitted) == 4 and not partial.exists()
    assert sorted(a[:2] for a in _answers(out.read_text())) == [(f"c{i}", 200) for i in range(6)]


def _cut_short_after_one_answer(monkeypatch, argv: list[str]) -> None:
    """Run ``argv`` (run-batch -o, one line at a time) cut short by a Ctrl-C once its first
    answer is written: its partial file holds that answer, and the record of what it was
    computed under."""
    from radixflow.server import batch

    output_line, written = batch.output_line, []

    def interrupted(line, status, body):
        written.append(line.custom_id)
        if len(written) == 2:
            raise KeyboardInterrupt
        return output_line(line, status, body)

    with monkeypatch.context() as patched:
        patched.setattr(batch, "output_line", interrupted)
        assert main(argv) == 130


def test_a_torn_last_answer_is_posted_again_and_restart_starts_over(zoo, tmp_path, capsys, monkeypatch):
    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(3)))
    argv = ["run-batch", MODEL, "-i", str(given), "--max-pending", "1", *FLAGS]
    assert main([*argv, "-o", str(whole)]) == 0
    rows = whole.read_text().splitlines(keepends=True)
    _cut_short_after_one_answer(monkeypatch, [*argv, "-o", str(out)])
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(rows[0] + rows[1][:30])  # killed as it wrote the second answer
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main([*argv, "-o", str(out)]) == 0
    said = "1 row kept (a last line cut short is dropped, and run again), 2 lines to run"
    assert said in capsys.readouterr().err
    assert len(submitted) == 2 and _answers(out.read_text()) == _answers(whole.read_text())
    partial.write_text(rows[0])
    submitted.clear()
    assert main([*argv, "-o", str(out), "--restart"]) == 0
    assert len(submitted) == 3 and "going on" not in capsys.readouterr().err and not partial.exists()


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"id": "batch_req_1", "custom_id": "other", "response": {"status_code": 200}}, "'other' is not in"),
        ({"id": "batch_req_9", "custom_id": "c0", "response": {"status_code": 200}}, "not the answer of"),
        # a row of score's, its record score's: it was refused by the row, "row 1: custom_id None
        # is not in --input", before the record that says what it is
        ({"id": 1, "line": 1, "scores": []}, "it was written by radixflow score, not run-batch"),
    ],
)
def test_a_partial_file_of_another_batch_is_refused_in_one_line(zoo, tmp_path, capsys, monkeypatch, row, why):
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(2)))
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    _cut_short_after_one_answer(monkeypatch, argv)  # a record of this run's: the rows are checked
    partial, meta = tmp_path / "out.jsonl.partial", tmp_path / "out.jsonl.partial.meta"
    partial.write_text(json.dumps(row) + "\n")
    if "score" in why:  # the record of the command whose row it is
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "command": "score"}))
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {out}: cannot go on from its partial file {partial}: " in err
    assert why in err and "give --restart to start over" in err
    assert partial.read_text() == json.dumps(row) + "\n" and not out.exists()


def test_a_partial_file_that_answers_a_line_twice_is_refused():
    from radixflow.server.batch import left_to_run, read_batch

    lines = read_batch(completion("a", "x") + "\n" + completion("b", "y") + "\n")
    row = {"id": "batch_req_1", "custom_id": "a", "response": {"status_code": 200}}
    assert left_to_run(lines, [row]) == lines[1:]
    with pytest.raises(ValueError, match="row 2: custom_id 'a' is answered twice"):
        left_to_run(lines, [row, row])


def test_a_partial_file_that_answers_every_line_becomes_the_output_without_a_request(
    zoo, tmp_path, capsys, monkeypatch
):
    # the summary of a run that posted nothing read "0 requests: ", a count of nothing after it
    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(2)))
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(whole), *FLAGS]) == 0
    _cut_short_after_one_answer(monkeypatch, ["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS])
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(whole.read_text())
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]) == 0
    err = capsys.readouterr().err.splitlines()
    said = f"radixflow: going on from {partial}: 2 rows kept, 0 lines to run"
    assert err[-2:] == [said, "radixflow: 0 requests"]
    assert submitted == [] and out.read_text() == whole.read_text() and not partial.exists()


def test_a_kept_error_answer_is_said_and_counted_in_the_exit_status(zoo, tmp_path, capsys, monkeypatch):
    # the run that kept a 404 answer summed up "1 request: 1 answered 200", yet ended 1
    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    refused = batch_line("bad", "/v1/completions", {"model": "gpt-4o", "prompt": "x"})
    given.write_text(refused + "\n" + completion("c", "Request") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "--max-pending", "1", *FLAGS]
    assert main([*argv, "-o", str(whole)]) == 1
    _cut_short_after_one_answer(monkeypatch, [*argv, "-o", str(out)])
    assert json.loads(whole.read_text().splitlines()[0])["custom_id"] == "bad"
    (tmp_path / "out.jsonl.partial").write_text(whole.read_text().splitlines(keepends=True)[0])
    capsys.readouterr()
    assert main([*argv, "-o", str(out)]) == 1
    assert ": 1 row kept (1 failed), 1 line to run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (["--seed", "7"], "it was computed with --seed 0, not 7"),
        (["--default-max-tokens", "9"], "it was computed with --default-max-tokens 256, not 9"),
        ("edit", "it was computed from another --input (the file has changed since, or is another one)"),
        # its first line deleted: the record said so, but the rows were read first, and refused
        # as "row 1: custom_id 'c0' is not in --input"
        ("delete", "it was computed from another --input (the file has changed since, or is another one)"),
    ],
)
def test_a_partial_file_computed_under_other_settings_is_refused_in_one_line(
    zoo, tmp_path, capsys, monkeypatch, change, why
):
    """Going on from a partial file under another seed or server default, or from a file whose
    bodies were edited since (the same custom_ids, another temperature), kept the answers of the
    first settings beside those of the second without a word; now the partial file records what
    its answers were computed under, and such a run is refused before anything runs."""
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(3)))
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    _cut_short_after_one_answer(monkeypatch, argv)
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text()
    if change == "edit":
        given.write_text(given.read_text().replace('"temperature": 0', '"temperature": 1.0'))
    if change == "delete":
        given.write_text("".join(given.read_text().splitlines(keepends=True)[1:]))
    change = [] if isinstance(change, str) else change
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main([*argv, *change]) == 2
    err = capsys.readouterr().err
    said = f"radixflow: error: --output {out}: cannot go on from its partial file {partial}: {why}; "
    assert err.count("\n") == 1 and err.startswith(said) and "give --restart to start over" in err
    assert submitted == [] and partial.read_text() == kept and not out.exists()
    assert main([*argv, *change, "--restart"]) == 0  # as the error says
    assert len(out.read_text().splitlines()) == len(given.read_text().splitlines()) and not partial.exists()
    assert not (tmp_path / "out.jsonl.partial.meta").exists()


def test_an_answer_of_a_server_error_kept_in_a_partial_file_is_posted_again(
    zoo, tmp_path, capsys, monkeypatch
):
    """A 5xx answer (the server failed: a round that raised, memory) kept in a partial file was
    kept as the line's answer, so going on never retried it and the run ended 1 however often it
    was run; now such an answer is dropped from the partial file and its line posted again (a
    4xx answer is the body's own fault, the same each time: it is kept)."""
    given, out, whole = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "whole.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(3)))
    argv = ["run-batch", MODEL, "-i", str(given), "--max-pending", "1", *FLAGS]
    assert main([*argv, "-o", str(whole)]) == 0
    _cut_short_after_one_answer(monkeypatch, [*argv, "-o", str(out)])
    rows = [json.loads(line) for line in whole.read_text().splitlines()]
    failed = {**rows[0], "response": {"status_code": 500, "request_id": None, "body": {"error": {}}}}
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(json.dumps(failed) + "\n" + json.dumps(rows[1]) + "\n")
    capsys.readouterr()
    submitted = _count_engine_requests(monkeypatch)
    assert main([*argv, "-o", str(out)]) == 0
    said = f"going on from {partial}: 1 row kept, 1 answer of a server error (5xx) dropped, 2 lines to run"
    assert said in capsys.readouterr().err
    assert len(submitted) == 2 and not partial.exists()
    answers = _answers(out.read_text())
    assert answers[0] == _answers(whole.read_text())[1]  # the kept answer first, as it was
    assert sorted(answers) == sorted(_answers(whole.read_text()))  # c0 answered once, 200


def test_an_answer_that_has_arrived_is_written_before_its_worker_waits_on_anything(
    zoo, tmp_path, capsys, monkeypatch
):
    """A worker counted an answer's arrival (an await: the workers share the count) before
    writing it, so a Ctrl-C or a cancel there lost an answer already computed; now it is written
    first, and nothing can stop a worker between an answer's arrival and its line."""
    from radixflow.server import batch

    add, calls = batch._Arrivals.add, []

    async def stopped(self):
        calls.append(1)
        if len(calls) == 2:  # stopped where the worker waits, the second answer in hand
            raise KeyboardInterrupt
        await add(self)

    monkeypatch.setattr(batch._Arrivals, "add", stopped)
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(4)))
    assert main(["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]) == 130
    kept = (tmp_path / "out.jsonl.partial").read_text()
    assert [row[0] for row in _answers(kept)] == ["c0", "c1"]


STUCK_BATCH = """
import os, signal, sys
import torch
from radixflow.cli import main
from radixflow.runners.torch_runner import TorchRunner
from radixflow.server.loop import EngineLoop

def stuck(self, batch):  # a worker call that never returns, busy in torch; a Ctrl-C as it starts
    os.kill(os.getpid(), signal.SIGINT)
    a = torch.randn(256, 256)
    while True:
        a @ a

def shutdown(self, drain_s):  # the shutdown begins waiting for the engine; then another Ctrl-C
    stop(self, drain_s)
    if sys.argv[1] == "twice":
        os.kill(os.getpid(), signal.SIGINT)

TorchRunner.run = stuck
stop, EngineLoop.shutdown = EngineLoop.shutdown, shutdown
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("ctrl_c", ["once", "twice"])
def test_a_run_cut_short_with_the_engine_stuck_ends_with_one_line_not_an_abort(zoo, tmp_path, ctrl_c):
    # a Ctrl-C waited 35 s (--drain-timeout, which run-batch says has no effect, and the grace)
    # for the stuck engine, said only "interrupted", and the interpreter's exit then ran under the
    # engine thread, still in torch: "terminate called without an active exception", exit 134; a
    # second Ctrl-C in that wait went straight to that abort
    pytest.importorskip("torch")
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("".join(completion(f"c{i}", f"Request {i}") + "\n" for i in range(3)))
    root = str(Path(radixflow.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]
    done = subprocess.run(
        [sys.executable, "-c", STUCK_BATCH, ctrl_c, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 130, done.stderr
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == f"radixflow: interrupted; {ROUND_LEFT}"
    assert not out.exists()


def test_a_body_over_the_limit_is_answered_413_naming_the_flag_of_this_command(zoo, tmp_path, capsys):
    # the 413 said "(radixflow serve --max-body-bytes)" in a run-batch answer, a command not run
    long = {"model": MODEL, "prompt": "word " * 400, "max_tokens": 1}
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(batch_line("long", "/v1/completions", long) + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-body-bytes", "1024", *FLAGS]
    assert main(argv) == 1
    capsys.readouterr()
    (row,) = map(json.loads, out.read_text().splitlines())
    message = row["response"]["body"]["error"]["message"]
    assert row["response"]["status_code"] == 413 and message.endswith("bytes (--max-body-bytes)"), message


def test_a_kept_refusal_under_another_cache_size_is_posted_again(zoo, tmp_path, capsys, monkeypatch):
    """A prompt refused for the cache's size (`--kv-blocks 8`: 400 'does not fit in the KV
    cache'), kept from a run cut short, stayed refused when the command went on under a cache it
    fits (a 4xx was taken to be the same each time): the output and the exit status said it
    failed. Now the partial file records the options that size the cache, and a kept error answer
    from a run under others is posted again."""
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(completion("long", "word " * 300) + "\n" + completion("c", "Request") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    _cut_short_after_one_answer(monkeypatch, [*argv, "--kv-blocks", "8"])  # the last --kv-blocks wins
    partial = tmp_path / "out.jsonl.partial"
    assert "does not fit in the KV cache" in partial.read_text()
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "1 answer of an error (4xx or 5xx) under other --token-budget, --block-size, --kv-blocks" in err
    assert "0 rows kept" in err and "2 lines to run" in err
    assert sorted(status for _, status, _ in _answers(out.read_text())) == [200, 200]
    # under the same options, a kept refusal stands: the same each time
    _cut_short_after_one_answer(monkeypatch, [*argv, "--kv-blocks", "8"])
    capsys.readouterr()
    assert main([*argv, "--kv-blocks", "8"]) == 1
    assert ": 1 row kept (1 failed), 1 line to run" in capsys.readouterr().err


def test_an_error_answer_has_a_string_request_id():
    # an answer with no id of its own (a 400's error body) wrote "request_id": null, where
    # OpenAI's batch output has a string
    from radixflow.server import batch

    line = batch.BatchLine(3, "c3", "/v1/completions", {})
    error = batch.output_line(line, 400, {"error": {"message": "bad", "type": "invalid_request_error"}})
    assert error["response"]["request_id"] == "batch_req_3" == error["id"]
    answer = batch.output_line(line, 200, {"id": "cmpl-1", "choices": []})
    assert answer["response"]["request_id"] == "cmpl-1"


def test_a_kept_refusal_under_another_max_pending_is_posted_again(zoo, tmp_path, capsys, monkeypatch):
    """A body of more engine requests than --max-pending queues is answered 400 ('2 candidates in
    one request; the server queues 1'); kept from a run cut short, it stayed refused when the
    command went on under a --max-pending it fits (the limits recorded were the cache's alone)."""
    scoring = {"model": MODEL, "context": "Q: yes?\nA:", "candidates": [" yes", " no"]}
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(batch_line("two", "/v1/score", scoring) + "\n" + completion("c", "Request") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), *FLAGS]
    _cut_short_after_one_answer(monkeypatch, [*argv, "--max-pending", "1"])
    assert "the server queues 1" in (tmp_path / "out.jsonl.partial").read_text()
    capsys.readouterr()
    assert main([*argv, "--max-pending", "2"]) == 0
    err = capsys.readouterr().err
    assert "1 answer of an error (4xx or 5xx) under other --token-budget" in err and "--max-pending" in err
    rows = map(json.loads, out.read_text().splitlines())
    statuses = {row["custom_id"]: row["response"]["status_code"] for row in rows}
    assert statuses == {"two": 200, "c": 200}


def test_a_body_is_posted_in_as_many_bytes_as_its_utf8_text_takes():
    """Bodies were posted with every non-ASCII character escaped (é: 6 bytes, where the file holds
    2; an emoji 12 for 4) and ", "/": " separators, so --max-body-bytes answered 413 for a body
    the file holds in a third of the limit, which serve takes from a client sending it as UTF-8.
    A lone surrogate (an escape the file may hold, no UTF-8 character) is still posted escaped."""
    from radixflow.server.batch import encoded

    body = {"model": MODEL, "prompt": "é😀" * 100, "max_tokens": 1}
    utf8 = json.dumps(body, ensure_ascii=False).encode("utf-8")
    assert len(encoded(body)) <= len(utf8) and json.loads(encoded(body)) == body
    lone = {"model": MODEL, "prompt": "a\ud800b"}
    assert json.loads(encoded(lone)) == lone


def test_a_kept_413_under_another_max_body_bytes_is_posted_again_and_the_rest_kept(
    zoo, tmp_path, capsys, monkeypatch
):
    """--max-body-bytes decides only whether a body is read (413), never an answer's content, yet
    a run that went on under another was refused ('computed with --max-body-bytes 1024, not ...';
    --restart: every answer computed again). Now it is a limit: a kept refusal is posted again."""
    long = {"model": MODEL, "prompt": "word " * 400, "max_tokens": 1}
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text(batch_line("long", "/v1/completions", long) + "\n" + completion("c", "Request") + "\n")
    argv = ["run-batch", MODEL, "-i", str(given), "-o", str(out), "--max-pending", "1", *FLAGS]
    _cut_short_after_one_answer(monkeypatch, [*argv, "--max-body-bytes", "1024"])
    assert '"status_code": 413' in (tmp_path / "out.jsonl.partial").read_text()
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "1 answer of an error (4xx or 5xx) under other" in err and "--max-body-bytes" in err
    rows = map(json.loads, out.read_text().splitlines())
    assert {row["custom_id"]: row["response"]["status_code"] for row in rows} == {"long": 200, "c": 200}


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ({"method": "POST", "url": {"model": MODEL, "prompt": "x" * 10_000}}, "url: one of"),
        ({"method": ["POST"] * 10_000, "url": "/v1/score"}, "method: only POST is supported"),
    ],
)
def test_a_bad_method_or_url_is_said_back_cut_short(row, said):
    """A body pasted where the url goes (or any large value) was echoed whole in the one-line
    error: megabytes on stderr. Now the value said back is cut, as a trace's are."""
    from radixflow.server.batch import BatchInputError, read_batch

    with pytest.raises(BatchInputError, match=said) as caught:
        read_batch(json.dumps({"custom_id": "a", **row, "body": {}}) + "\n")
    assert len(str(caught.value)) < 200 and str(caught.value).endswith("...")
