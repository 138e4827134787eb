"""A call's engine requests: each prompt's params checked and tokenized (once per params object),
its prompt truncated and its ``max_tokens`` fitted where asked, one `Call` per choice; a refusal is
a `PromptError` naming the prompt, raised before any request runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from radixflow.engine.engine import Engine
from radixflow.generation.calls import Call, PromptError
from radixflow.generation.params import SamplingParams
from radixflow.generation.prompts import PromptReader, params_per_prompt
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.problems import ProblemError, plain, shown
from radixflow.scheduler.request import Request


@dataclass
class CallBuilder:
    """Builds one call's requests from the LLM's engine and readers, each reached only when needed
    (a closed LLM's raise RuntimeError; a checkpoint without a tokenizer's ValueError)."""

    engine: Callable[[], Engine]
    read: PromptReader
    tokenizer: Callable[[], TextTokenizer]
    ids: Iterator[int]  # request ids, shared by every call of the LLM

    def build(
        self,
        token_prompts: list[list[int]],
        params: SamplingParams | Sequence[SamplingParams] | None,
        namespace: str,
        item: str | Sequence[str],
        fit: bool = False,
    ) -> tuple[list[Call], list[str] | None]:
        """The engine requests, and the label of each prompt (None: a lone prompt, not named);
        ValueError for params that cannot run, naming the prompt. ``fit``: see `LLM.generate`."""
        if not isinstance(namespace, str):  # before any runs (the engine would fail each request alone)
            raise ValueError(f"namespace must be a string, got {namespace!r}")
        if not isinstance(plain(fit), bool):  # else its truth: fit="no" capped as True does
            raise ValueError(f"fit: must be true or false, got {shown(fit)}")
        labels = [f"{item} {i}" for i in range(len(token_prompts))] if isinstance(item, str) else list(item)
        # one prompt of `generate` is not named; any other item is (a candidate, a context's)
        named = len(token_prompts) > 1 or item != "prompt"
        params_list = params_per_prompt(params, len(token_prompts))
        lone = params if isinstance(params, SamplingParams) and not token_prompts else None
        problem = None if lone is None else lone.problem()
        if problem is not None:  # no prompts to run: a mistake in the parameters is still one
            raise PromptError(problem, None)
        if any(_has_texts(p) for p in params_list):
            self.tokenizer()  # stop strings and choices are text: refused without a tokenizer
        calls: list[Call] = []
        tokenized: dict[int, SamplingParams] = {}  # one params object for many prompts: tokenized once
        for i, (prompt, sp) in enumerate(zip(token_prompts, params_list, strict=True)):
            label = labels[i] if named else None
            sp = self._checked(sp, label, tokenized)
            calls += self._choices(i, prompt, sp, namespace, fit, label)
        return calls, labels if named else None

    def _checked(
        self, sp: SamplingParams, label: str | None, tokenized: dict[int, SamplingParams]
    ) -> SamplingParams:
        """``sp`` checked against the model and with its texts tokenized (``tokenized`` caches one
        per params object); `PromptError` naming ``label`` where it cannot run."""
        # before `choices`, which needs a valid n
        problem = sp.problem() or sp.context_problem(self.engine().runner.model.max_context)
        if problem is not None:
            raise PromptError(problem, label)
        if id(sp) not in tokenized:
            try:
                tokenized[id(sp)] = sp.tokenized(self.read.encode_bare)
            except ProblemError as e:  # a choice or bad word the tokenizer refuses
                raise PromptError(e.problem, label) from None
        return tokenized[id(sp)]

    def _choices(
        self, i: int, prompt: list[int], sp: SamplingParams, namespace: str, fit: bool, label: str | None
    ) -> list[Call]:
        """Prompt ``i``'s requests, one per choice (`SamplingParams.n`), in choice order;
        `PromptError` naming ``label`` for a ``min_tokens`` past the room ``fit`` caps to."""
        engine = self.engine()
        prompt = sp.truncated(prompt, engine.runner.model.max_context)
        room = engine.room(len(prompt))
        problem = sp.room_problem(room) if fit else None
        if problem is not None:
            raise PromptError(problem, label)
        fitted = sp.fitted(room) if fit else sp
        calls = []
        for choice, choice_params in enumerate(fitted.choices()):
            rid = f"gen-{next(self.ids)}"
            req = Request(rid, tuple(prompt), namespace, engine.now, sampling=choice_params)
            calls.append(Call(req, i, choice))
        return calls


def _has_texts(sp: SamplingParams) -> bool:
    """Whether ``sp`` lists stop strings, choices or bad words (text, which needs a tokenizer).
    Only a tuple counts: a value of another kind (a numpy array, whose truth is an error) is for
    `SamplingParams.problem` to name."""
    texts = (sp.stop, sp.guided_choice, sp.bad_words)
    return any(isinstance(listed, tuple) and len(listed) > 0 for listed in texts)
