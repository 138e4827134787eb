"""What the fleet's ingress (`RemoteLoop`) keeps of each prompt in flight: the HTTP request it
belongs to (`Submitted`), its relay's progress across attempts (`Relayed`), a replica's refusal
(`NotTaken`) and the per-replica figures `GET /fleet` shows."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from radixflow.cluster.wire import Job
from radixflow.scheduler.request import Request
from radixflow.server.events import Final, Sink


class NotTaken(Exception):
    """``replica`` answered a job with a refusal (`NOT_TAKEN`) before sending anything."""

    def __init__(self, final: Final, replica: str) -> None:
        super().__init__(f"{final.status} {final.error}")
        self.replica = replica


@dataclass
class ReplicaFigures:
    answered: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0


@dataclass
class Submitted:  # what the prompts of one HTTP request (one `submit`) share
    rejected: bool = False  # a prompt of it was refused by every replica: counted once
    flights: list[Flight] = field(default_factory=list)


@dataclass
class Flight:
    request: Request
    index: int
    sink: Sink
    arrival: float
    submitted: Submitted = field(default_factory=Submitted)
    job: Job | None = None  # what its replicas are sent (the router reads its prompt)
    answered: bool = False
    sent: bool = False  # an event of it reached the client (a streamed token)
    # the replica that sent a token of it, or its output: its prompt is cached there (None: none)
    ran_on: str | None = None
    aborted: bool = False  # its client went away: nobody to answer
    task: asyncio.Task | None = field(default=None, repr=False)


@dataclass
class Relayed:
    """What a prompt's relay has passed on so far, across its attempts."""

    sent: bool = False  # this attempt sent an event to the client: no retry from here
    first_token: bool = False  # its time to first token is counted
