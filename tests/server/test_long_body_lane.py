"""Long bodies are read one piece at a time (server/limits.py `LongBodyLane`), short ones beside them,
a long upload that stalls does not keep the next one waiting, and long bodies make way while the
engine answers requests (`Answering`, counted by each `Submission`). Driven at the ASGI level with
uploads whose pieces the test hands over itself: no server, no clock."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope, Send

from radixflow.server.limits import Answering, BodyLimit, LongBodyLane
from radixflow.server.submission import Submission

LONG = 1000  # bytes: longer bodies take the lane


class Upload:
    """One request's body, handed over piece by piece as the test says."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.asked = self.delivered = 0  # pieces the server has asked for, and has had
        self.released: asyncio.Queue[None] = asyncio.Queue()

    @property
    def scope(self) -> Scope:
        size = str(sum(map(len, self.pieces))).encode()
        return {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-length", size)]}

    async def receive(self) -> Message:
        i = self.asked
        self.asked += 1
        await self.released.get()
        self.delivered += 1
        return {"type": "http.request", "body": self.pieces[i], "more_body": i + 1 < len(self.pieces)}

    @property
    def waiting(self) -> bool:
        return self.asked > self.delivered

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self.released.put_nowait(None)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    message = await receive()
    scope["seen"] = message["body"]


async def settle() -> None:
    for _ in range(50):  # every ready step of every task runs (no timers involved)
        await asyncio.sleep(0)


def test_long_bodies_are_read_one_piece_at_a_time_and_short_ones_beside_them():
    async def main() -> None:
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=3600))
        uploads = [Upload([bytes([65 + i]) * 600] * 3) for i in range(3)]
        scopes = [u.scope for u in uploads]
        tasks = [
            asyncio.ensure_future(limit(s, u.receive, _no_send)) for s, u in zip(scopes, uploads, strict=True)
        ]
        for step in range(9):
            await settle()
            waiting = [u for u in uploads if u.waiting]
            assert len(waiting) == 1, f"step {step}: {len(waiting)} long bodies read at once"
            if step == 4:  # a short body is read while a long one holds the lane
                short = Upload([b"{}"])
                short.release()
                await asyncio.wait_for(limit(short.scope, short.receive, _no_send), 60)
            waiting[0].release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert [s["seen"] for s in scopes] == [bytes([65 + i]) * 1800 for i in range(3)]

    asyncio.run(main())


def test_a_stalled_long_upload_lets_the_next_one_be_read():
    async def main() -> None:
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=0))
        stalled, moving = Upload([b"a" * 2000]), Upload([b"b" * 2000])
        scopes = [stalled.scope, moving.scope]
        tasks = [
            asyncio.ensure_future(limit(s, u.receive, _no_send))
            for s, u in zip(scopes, (stalled, moving), strict=True)
        ]
        moving.release()  # the stalled one never sends anything until the end
        await asyncio.wait_for(tasks[1], 60)
        assert scopes[1]["seen"] == b"b" * 2000 and not tasks[0].done()
        stalled.release()  # it still gets its body once it sends
        await asyncio.wait_for(tasks[0], 60)
        assert scopes[0]["seen"] == b"a" * 2000

    asyncio.run(main())


def test_a_cancelled_request_gives_the_lane_back():
    async def main() -> None:
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=3600))
        gone, next_one = Upload([b"a" * 2000]), Upload([b"b" * 2000])
        task = asyncio.ensure_future(limit(gone.scope, gone.receive, _no_send))
        await settle()
        task.cancel()  # the server closes the request while it holds the lane
        waiting = asyncio.ensure_future(limit(next_one.scope, next_one.receive, _no_send))
        next_one.release()
        await asyncio.wait_for(waiting, 60)

    asyncio.run(main())


async def _no_send(message: Message) -> None:
    raise AssertionError(f"nothing is answered here: {message}")


def test_a_long_bodys_pieces_are_awaited_in_the_requests_own_task():
    """No task per piece (a body of megabytes comes in dozens of pieces, each one a turn of the
    event loop that every other client waits behind): the lane only times the piece."""

    async def main() -> None:
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=3600))
        upload = Upload([b"a" * 700] * 3)
        tasks: list[asyncio.Task[object] | None] = []
        receive = upload.receive

        async def watched() -> Message:
            tasks.append(asyncio.current_task())
            return await receive()

        upload.release(3)
        request = asyncio.ensure_future(limit(upload.scope, watched, _no_send))
        await asyncio.wait_for(request, 60)
        assert tasks == [request] * 3

    asyncio.run(main())


def test_long_bodies_make_way_while_the_engine_answers_and_short_ones_do_not():
    async def main() -> None:
        answering = Answering()
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=3600, answering=answering, yield_s=3600))
        long, short = Upload([b"a" * 700] * 2), Upload([b"{}"])
        scope = long.scope
        answering.started()  # a request is being answered
        task = asyncio.ensure_future(limit(scope, long.receive, _no_send))
        await settle()
        assert long.asked == 0  # not even the first piece
        short.release()
        await asyncio.wait_for(limit(short.scope, short.receive, _no_send), 60)
        answering.ended()
        await settle()
        assert long.asked == 1
        answering.started()  # a second request: the next piece waits again
        long.release()
        await settle()
        assert long.asked == 1
        answering.ended()
        await settle()
        long.release()
        answering.started()  # the whole body is in: it is handed on (and parsed) once none is
        await settle()
        assert long.asked == 2 and "seen" not in scope
        answering.ended()
        await asyncio.wait_for(task, 60)
        assert scope["seen"] == b"a" * 1400

    asyncio.run(main())


def test_a_long_body_waits_for_answers_only_so_long():
    async def main() -> None:
        answering = Answering()
        answering.started()  # and never ended
        limit = BodyLimit(app, 1 << 20, LongBodyLane(LONG, stall_s=3600, answering=answering, yield_s=0))
        long = Upload([b"a" * 2000])
        long.release()
        scope = long.scope
        await asyncio.wait_for(limit(scope, long.receive, _no_send), 60)
        assert scope["seen"] == b"a" * 2000

    asyncio.run(main())


class _Loop:
    def submit(self, items: object, sink: object, stream: bool) -> None:
        pass


def test_a_submission_counts_as_answered_once_whatever_ends_it():
    async def main() -> None:
        answering = Answering()
        aborted, dropped = Submission(_Loop(), [], False, answering), Submission(_Loop(), [], True, answering)
        assert answering.count == 2
        aborted.abort()
        aborted.abort()
        assert answering.count == 1
        del dropped  # a stream never started: nobody reads it, nobody aborts it
        assert answering.count == 0
        await asyncio.wait_for(answering.none(3600), 60)

    asyncio.run(main())
