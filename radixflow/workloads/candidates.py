"""Candidate-conditioned prefill workloads: G shared contexts, each followed by K candidates."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from radixflow.problems import NOT_A_NUMBER, NOT_AN_INTEGER, NOT_FINITE, Problem, ProblemError, shown
from radixflow.scheduler.request import MAX_ARRIVAL_S

ORDERS = ("grouped", "interleaved", "shuffled")
ARRIVALS = ("batch", "poisson", "bursty")
# candidates: K continuations of each group's context; chats: each group is a conversation whose
# K turns each extend the previous turn's prompt by candidate_len tokens (a reply and a new message)
KINDS = ("candidates", "chats")
# Prompt tokens in one workload (generated or replayed), all requests together: 2**25 is about
# 500x the default workload and a few minutes of sim runner time; past it a typo such as
# --groups 100000000 would silently spend hours and gigabytes building the workload.
MAX_WORKLOAD_TOKENS = 1 << 25
# Requests in one workload, generated or a trace: the token limit does not bound them (a one-token prompt is a
# request too), and each costs about 1.5 KB of Python objects before it runs. 2**20 is about
# 16,000x the default workload's 64 requests and above the token limit's longest useful queues;
# past it --groups 30000000 with one-token prompts built gigabytes of requests.
MAX_WORKLOAD_REQUESTS = 1 << 20
MIN_RATE = 1e-6  # requests/s; below it exponential gaps overflow to infinity
# A key as the door that sets it names it in a message (an experiment TOML: the key itself; the
# command line: its flag); None: that door cannot set it (always its default), so it is left out
KeySpell = Callable[[str], str | None]
COUNT_KEYS = ("groups", "candidates", "independent")
PROMPT_KEYS = ("shared_prefix_len", "context_len", "candidate_len")
# The least value of each numeric key: one table, one wording (`value_rule`) for every door that
# sets one: an experiment TOML's key, bench's flag as it is read, a spec built in Python
AT_LEAST: dict[str, float] = {"seed": 0, "groups": 0, "candidates": 0, "independent": 0}
AT_LEAST |= {"shared_prefix_len": 0, "context_len": 0, "candidate_len": 1, "burst_size": 1, "namespaces": 1}
AT_LEAST |= {"vocab_size": 2, "skew": 0.0, "rate": MIN_RATE}
# the engine takes a negative seed (read mod 2^64); a workload draws with random.Random
_LEAST_WHY = {
    "seed": " for a generated workload (random.Random(-s) draws what random.Random(s) draws)",
    "rate": " requests/s",
}


def as_key(key: str) -> str | None:
    return key


@dataclass(frozen=True)
class WorkloadSpec:
    groups: int = 8
    candidates: int = 8
    context_len: int = 1024
    candidate_len: int = 64
    order: str = "grouped"  # queue order of the candidate requests
    arrival: str = "batch"  # batch: all at t=0; poisson: exponential gaps; bursty: bursts at rate
    rate: float = 100.0  # requests per second for poisson / bursty
    burst_size: int = 16
    independent: int = 0  # unrelated requests mixed into the queue
    namespaces: int = 1  # groups are spread round-robin over this many namespaces
    shared_prefix_len: int = 0  # nested sharing: a system prompt before every group's context
    kind: str = "candidates"  # one of KINDS
    # popularity skew: group g gets its share of the groups x candidates requests proportional to
    # (g + 1) ** -skew, rounded, and at least one, so the groups do not hold groups x candidates
    # exactly: one or two off by the rounding (24 x 6 at skew 1: 145, docs/memory.md's chat
    # workload), and more where the floor of one lifts many small shares (64 x 1: 92); `requests`
    # counts them. 0: every group has `candidates`
    skew: float = 0.0
    vocab_size: int = 32_000
    seed: int = 0

    def problem(self, spell: KeySpell = as_key) -> Problem | None:
        """Why this workload cannot be built (None when it can), the keys its message adds up
        spelled as ``spell`` does. Pure: nothing is drawn."""
        for name in (f.name for f in fields(self)):  # every kind first: the bounds compare them
            if (rule := kind_rule(name, getattr(self, name))) is not None:
                return Problem(name, f"{rule}, got {shown(getattr(self, name))}")
        for name in AT_LEAST:
            if (rule := value_rule(name, getattr(self, name))) is not None:
                return Problem(name, f"{rule}, got {shown(getattr(self, name))}")
        for name, known in (("order", ORDERS), ("arrival", ARRIVALS), ("kind", KINDS)):
            if getattr(self, name) not in known:
                return Problem(name, f"unknown {name} {getattr(self, name)!r} (known: {', '.join(known)})")
        return self._size_problem(spell) or self._span_problem()

    def _span_problem(self) -> Problem | None:
        """Arrivals past `MAX_ARRIVAL_S`, which its own trace could not hold. Bursty ones are
        known; Poisson ones are bounded at twice their mean span: at the sizes where that passes
        the limit (over 2,000 gaps), a draw twice its mean has a chance below e**-600. The span
        is said in whole seconds, rounded up: three digits printed one just past the limit as
        the limit."""
        last = self.requests - 1
        if self.arrival == "poisson":
            span, how = 2 * last / self.rate, f"at {self.rate:g} requests/s arrive over up to"
        else:  # batch: 0; bursty: the last burst's start
            span = 0.0 if self.arrival == "batch" else last // self.burst_size * self.burst_size / self.rate
            how = f"in bursts of {self.burst_size} at {self.rate:g} requests/s arrive over"
        if span <= MAX_ARRIVAL_S:
            return None
        return Problem(
            "rate",
            f"{self.requests} requests {how} {math.ceil(span)} s; "
            f"arrivals past {MAX_ARRIVAL_S} s are refused (a float no longer tells µs apart there)",
        )

    def _size_problem(self, spell: KeySpell) -> Problem | None:
        """An empty or too large workload (tokens or requests); a skewed one far too large is
        refused before its groups are sized (one weight each), as an unskewed one is by arithmetic."""
        least = self.groups * (self.shared_prefix_len + self.context_len + self.candidate_len)
        if self.skewed and least > MAX_WORKLOAD_TOKENS:  # every group has at least one request
            return Problem(
                "groups",
                f"workload too large: {shown(self.groups)} groups of at least one request of "
                f"{shown(least // self.groups)} tokens ({_summed(PROMPT_KEYS, spell)}) are "
                f"at least {shown(least)} prompt tokens; the limit is {MAX_WORKLOAD_TOKENS}",
            )
        # counted at its least first, so that far too many are never sized (nor shared out as
        # floats, which overflow past 1e308): each group rounds its share of groups x candidates
        # to at least one, and at most half a request below it, so they hold at least this many
        least_requests = max(self.groups, self.groups * self.candidates - self.groups // 2)
        if self.skewed and (problem := self._count_problem(least_requests + self.independent, True, spell)):
            return problem
        if self.requests == 0:  # named for what was given: no candidates for the groups, or no groups
            empty = "empty workload: no groups/candidates and no independent requests"
            return Problem("candidates" if self.groups else "groups", empty)
        if self.total_tokens > MAX_WORKLOAD_TOKENS:
            return Problem(
                self._largest_factor(),
                f"workload too large: {shown(self.requests)} requests ({_counted_words(spell)}) of "
                f"up to {shown(self.prompt_len)} tokens ({self.prompt_words(spell)}) are "
                f"{shown(self.total_tokens)} prompt tokens; the limit is {MAX_WORKLOAD_TOKENS}",
            )
        return self._count_problem(self.requests, False, spell)

    def _count_problem(self, count: int, least: bool, spell: KeySpell) -> Problem | None:
        """Too many requests, however few tokens they hold (``least``: ``count`` is a lower bound)."""
        if count <= MAX_WORKLOAD_REQUESTS:
            return None
        return Problem(
            max(COUNT_KEYS, key=lambda name: getattr(self, name)),
            f"workload too large: {'at least ' if least else ''}{shown(count)} requests "
            f"({_counted_words(spell)}); the limit is {MAX_WORKLOAD_REQUESTS} requests",
        )

    def _largest_factor(self) -> str:
        """The largest of the counts and lengths whose product is the workload's size: the one a
        too-large workload's error names."""
        factors = ("groups", "candidates", "independent", "shared_prefix_len", "context_len", "candidate_len")
        return max(factors, key=lambda name: getattr(self, name))

    def validate(self) -> None:
        """`problem`, raising `ProblemError` (a ValueError)."""
        problem = self.problem()
        if problem is not None:
            raise ProblemError(problem)

    @property
    def skewed(self) -> bool:
        """Groups sized by popularity: a skew, and candidates to share among the groups."""
        return self.skew != 0 and self.candidates > 0 and self.groups > 0

    @property
    def requests(self) -> int:
        return (sum(self.group_sizes()) if self.skewed else self.groups * self.candidates) + self.independent

    @property
    def prompt_len(self) -> int:
        """The longest prompt's tokens (`prompt_parts`)."""
        return sum(self.prompt_parts().values())

    def prompt_parts(self) -> dict[str, int]:
        """The longest prompt's tokens by the key that sets them: shared prefix, context and
        candidate; a chat's last turn carries every turn's candidate_len. Independent ones lack
        the prefix: alone, they are the longest."""
        largest = self._largest_group()
        if largest == 0:
            return {"context_len": self.context_len, "candidate_len": self.candidate_len}
        turns = largest if self.kind == "chats" else 1
        return {
            "shared_prefix_len": self.shared_prefix_len,
            "context_len": self.context_len,
            "candidate_len": turns * self.candidate_len,
        }

    def prompt_words(self, spell: KeySpell = as_key) -> str:
        """How `prompt_len` adds up, in the keys' names as ``spell`` gives them, for messages: a
        sum of the three keys is not a chat's last turn."""
        turns = self.prompt_parts()["candidate_len"] // self.candidate_len
        words = {key: spell(key) for key in self.prompt_parts()}
        if turns != 1 and words["candidate_len"] is not None:
            words["candidate_len"] = f"{shown(turns)} turns × {words['candidate_len']}"
        return " + ".join(word for word in words.values() if word is not None)

    def prompt_lengths(self) -> list[int]:
        """Every request's prompt length, group by group, then the independent ones (not in queue
        order; no token is drawn): what engine pools sized to the workload are sized to."""
        head = self.shared_prefix_len + self.context_len
        turns = (lambda k: k + 1) if self.kind == "chats" else (lambda k: 1)
        grouped = [head + turns(k) * self.candidate_len for size in self.group_sizes() for k in range(size)]
        return grouped + [self.context_len + self.candidate_len] * self.independent

    def _largest_group(self) -> int:
        """Requests in the largest group (a chat's turns)."""
        if self.skewed:
            return max(self.group_sizes())
        return self.candidates if self.groups else 0

    def group_sizes(self) -> list[int]:
        """Requests in each group: `candidates` each, or shares of groups x candidates by
        popularity, each rounded on its own and at least one (their sum may differ from it)."""
        if not self.skewed:
            return [self.candidates] * self.groups
        weights = [(g + 1) ** -self.skew for g in range(self.groups)]
        total, weight = self.groups * self.candidates, sum(weights)  # summed once: linear in groups
        return [max(1, round(total * w / weight)) for w in weights]

    @property
    def total_tokens(self) -> int:
        """Prompt tokens of every request, each at its own length (no tokens are drawn)."""
        sizes = self.group_sizes() if self.skewed else [self.candidates]
        grouped = sum(map(self._group_tokens, sizes)) * (1 if self.skewed else self.groups)
        return grouped + self.independent * (self.context_len + self.candidate_len)

    def _group_tokens(self, size: int) -> int:
        """A group's prompt tokens: each request after the prefix and context; a chat's k-th turn
        carries k candidates."""
        candidates = size * (size + 1) // 2 if self.kind == "chats" else size
        return size * (self.shared_prefix_len + self.context_len) + candidates * self.candidate_len

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def kind_rule(name: str, value: object) -> str | None:
    """The kind ``value`` is not, for the workload key ``name``, in the words every door uses (an
    integer key's float or bool, a number key's text); None: it is of its kind. A spec built in
    Python is typed only here (the TOML's keys and bench's flags are typed as they are read)."""
    kind = _KINDS[name]
    if kind is str or (isinstance(value, kind | int) and not isinstance(value, bool)):
        return None  # a string key's value is checked against the ones it knows
    return NOT_AN_INTEGER if kind is int else NOT_A_NUMBER


def value_rule(name: str, value: object) -> str | None:
    """The rule ``value`` breaks as the numeric workload key ``name`` (its kind, finite, its least
    value in `AT_LEAST`), as every door words it before ", got <value>"; None: it keeps them."""
    if (rule := kind_rule(name, value)) is not None:
        return rule
    assert isinstance(value, int | float)  # kind_rule passed a number key's
    if not _finite(name, value):
        return NOT_FINITE
    low = AT_LEAST[name]
    return None if value >= low else f"must be at least {low:g}{_LEAST_WHY.get(name, '')}"


def _finite(name: str, value: int | float) -> bool:
    """Whether ``value`` is finite as the key ``name`` runs it: an integer key's int always is, a
    number key's int is a float (one past its range, 10**400, is none: math.isfinite overflows)."""
    if _KINDS[name] is int:
        return True
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _summed(keys: tuple[str, ...], spell: KeySpell) -> str:
    return " + ".join(word for word in map(spell, keys) if word is not None)


def _counted_words(spell: KeySpell) -> str:
    groups, candidates, independent = map(spell, COUNT_KEYS)
    return f"{groups} × {candidates} + {independent}"


_KINDS = {f.name: type(f.default) for f in fields(WorkloadSpec)}  # int, float or str
