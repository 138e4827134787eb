"""What an `LLM` call is given, as token ids: prompts, a scoring context and its candidates,
conversations; and its sampling parameters, one per prompt. Each refusal is a ValueError naming
the item at fault ("prompt 2", "candidate 1", "context")."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from radixflow.generation.chat import NO_TEMPLATE, ChatTemplateError
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer, TextTooLong, TokenizerError
from radixflow.problems import counted
from radixflow.scheduler.sampling import SamplingParams as TokenSamplingParams

Prompt = str | Sequence[int]  # text, or token ids used as they are
Messages = Sequence[Mapping[str, Any]]
CANDIDATES_SHAPE = "candidates must be a list of strings or token-id lists"  # as the server says it
CONVERSATIONS_SHAPE = "conversations: a list of messages or a list of such lists"
PROMPTS_SHAPE = "prompts: text, a list of token ids, or a list of those"
VLLM_PROMPT = "a dict prompt is vLLM's {'prompt': text} or {'prompt_token_ids': ids}"
PARAMS_SHAPE = "sampling_params: a radixflow.SamplingParams or a list of them (one per prompt)"


class PromptReader:
    """Text, token ids and conversations as token ids. ``tokenizer`` gives the model's tokenizer,
    asked only for text (it raises for a model without one: token ids need none); ``limited``
    (default: ``tokenizer``) the one that reads prompts, contexts and candidates, which may refuse
    a text too long to run before tokenizing it (`TextTokenizer.limited`)."""

    def __init__(
        self, tokenizer: Callable[[], TextTokenizer], limited: Callable[[], TextTokenizer] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.limited = limited or tokenizer

    def prompts(self, prompts: Prompt | Sequence[Prompt], special: bool = True) -> list[list[int]]:
        """`LLM.generate`'s prompts: one prompt, or a list of them (an empty list is no prompts,
        as in vLLM: ``[]`` is no empty prompt). A prompt may also be vLLM's dict form. A text
        prompt gets the tokenizer's special tokens where ``special`` (token ids go as given)."""
        if isinstance(prompts, str | Mapping) or (is_token_list(prompts) and prompts):
            prompts = [prompts]  # type: ignore[list-item]
        # bytes iterate over their byte values, which would run as token ids
        if isinstance(prompts, bytes | bytearray) or not isinstance(prompts, Iterable):
            raise ValueError(f"{PROMPTS_SHAPE}, got {_what(prompts)}")
        listed = list(prompts)
        if not isinstance(prompts, Sequence | Iterator) and listed and all(map(_is_token_id, listed)):
            # one prompt as an array (numpy's): each id was read as a prompt, and refused as none
            given = f"{_what(prompts)} of token ids (one prompt: a list, .tolist())"
            raise ValueError(f"{PROMPTS_SHAPE}, got {given}")
        prompts = listed
        out = []
        for i, p in enumerate(prompts):
            label = "prompt" if len(prompts) == 1 else f"prompt {i}"  # as the engine's problems name it
            if isinstance(p, Mapping):
                p = _unwrapped(p, label)
            if isinstance(p, str):
                out.append(self.encode(p, label, special))
            elif is_token_list(p):
                out.append(list(map(int, p)))
            else:
                raise ValueError(f"prompt {i} is neither text nor a list of token ids{_not_ids(p)}")
        return out

    def conversations(self, conversations: Messages | Sequence[Messages]) -> list[list[int]]:
        """Each conversation as the chat template writes it up to the assistant's turn, tokenized
        (the template writes the special tokens itself)."""
        # text, one message (a mapping) or None would be iterated as characters, keys, or not at all
        if isinstance(conversations, str | Mapping) or not isinstance(conversations, Iterable):
            raise ValueError(f"{CONVERSATIONS_SHAPE}, got {_what(conversations)}")
        convs = [conversations] if is_conversation(conversations) else list(conversations)
        # the same of each conversation in a list: a text's characters were read as its messages
        bad = next((i for i, c in enumerate(convs) if not _listed(c)), None)
        if bad is not None:
            raise ValueError(f"{CONVERSATIONS_SHAPE}, got {_what(convs[bad])} as item {bad}")
        named = ["prompt" if len(convs) == 1 else f"prompt {i}" for i in range(len(convs))]
        texts = [self.render(conv, label) for conv, label in zip(convs, named, strict=True)]
        return [self.encode(t, label, special=False) for t, label in zip(texts, named, strict=True)]

    def context(self, context: Prompt | Messages, special: bool = True) -> list[int]:
        """A scoring context's tokens (``special``: a text's with the tokenizer's special
        tokens); ValueError for a value of another shape (a lone token id is not a context of
        one token)."""
        if is_conversation(context):
            chat = self.tokenizer().chat
            if not chat.available:  # the template's own advice is generate's: a plain prompt
                raise ChatTemplateError(
                    f"{NO_TEMPLATE}: give the context as text or token ids, not messages", "context"
                )
            text = chat.render(context)  # type: ignore[arg-type]
            return self.encode(text, "context", special=False)  # the template writes them itself
        if isinstance(context, str):
            return self.encode(context, "context", special)
        if is_token_list(context):
            return [int(t) for t in context]  # type: ignore[union-attr]
        raise ValueError("context must be a string, a list of token ids or a list of messages")

    def candidates(self, candidates: Sequence[Prompt]) -> list[list[int]]:
        """Each candidate's tokens; ValueError for candidates of another shape (one string is not
        a candidate per character, a mapping not its keys)."""
        if isinstance(candidates, str | Mapping) or not isinstance(candidates, Iterable):
            raise ValueError(f"{CANDIDATES_SHAPE}, got a {type(candidates).__name__}")
        ids = []
        for i, c in enumerate(candidates):
            if isinstance(c, str):
                ids.append(self.encode(c, f"candidate {i}", special=False))
            elif is_token_list(c):
                ids.append([int(t) for t in c])
            else:
                raise ValueError(f"{CANDIDATES_SHAPE} (candidate {i} is neither)")
        return ids

    def render(self, conversation: Messages, label: str) -> str:
        """``conversation`` as the chat template writes it; its ChatTemplateError names it by
        ``label`` when it is one of several (``prompt 2: messages[0].role: ...``)."""
        chat = self.tokenizer().chat
        try:
            return chat.render(conversation)
        except ChatTemplateError as e:
            if label == "prompt" or chat.source is None:  # alone, or the model's (no template)
                raise
            raise ChatTemplateError(f"{label}: {e}", e.param) from None

    def encode(self, text: str, label: str, special: bool = True) -> list[int]:
        """``text``'s tokens (``special``: with the tokenizer's special tokens); text with no UTF-8
        form, or too long to run, is a ValueError named by ``label`` (``prompt 2``, ``candidate 1``)."""
        tokenizer = self.limited()  # its refusal (no tokenizer.json) is the model's, not the text's
        try:
            return tokenizer.encode(text, add_special_tokens=special)
        except TextTooLong as e:  # its problem names "prompt": the text is this label's
            raise ValueError(f"{label}: {e.problem.message}") from None
        except TokenizerError as e:
            raise ValueError(f"{label}: {e}") from None

    def encode_bare(self, text: str) -> list[int]:
        """``text``'s tokens without special ones: a choice, a banned word, a candidate."""
        return self.tokenizer().encode(text, add_special_tokens=False)


def params_per_prompt(
    params: SamplingParams | Sequence[SamplingParams] | None, n: int
) -> list[SamplingParams]:
    """One `SamplingParams` per prompt; ValueError for anything else (a dict, the scheduler's
    own `SamplingParams`, which lacks the text-level fields), or a list of another length."""
    if params is None:
        return [SamplingParams()] * n
    if isinstance(params, SamplingParams):
        return [params] * n
    if not isinstance(params, Sequence) or isinstance(params, str):
        raise ValueError(f"{PARAMS_SHAPE}, got {_what(params)}")
    wrong = next((p for p in params if not isinstance(p, SamplingParams)), None)
    if wrong is not None:
        raise ValueError(f"{PARAMS_SHAPE}, got {_what(wrong)} in the list")
    if len(params) != n:
        raise ValueError(f"{len(params)} SamplingParams for {counted(n, 'prompt')}")
    return list(params)


def truncates(params: object) -> bool:
    """Whether any of a call's ``sampling_params`` (one, a list, or None; of any type: they are
    checked later) keeps only a prompt's last tokens."""
    listed = [params] if isinstance(params, SamplingParams) else params
    if not isinstance(listed, Sequence):
        return False
    return any(isinstance(p, SamplingParams) and p.truncate_prompt_tokens is not None for p in listed)


def _unwrapped(prompt: Mapping[Any, Any], label: str) -> Prompt:
    """vLLM's TextPrompt ``{"prompt": text}`` or TokensPrompt ``{"prompt_token_ids": ids}`` as
    the text or ids (a mapping read as a list would be its keys); ValueError for another dict."""
    keys = sorted(str(k) for k in prompt)
    if keys == ["prompt"] and isinstance(prompt["prompt"], str):
        return prompt["prompt"]
    if keys == ["prompt_token_ids"] and is_token_list(prompt["prompt_token_ids"]):
        return prompt["prompt_token_ids"]
    if keys in (["prompt"], ["prompt_token_ids"]):
        raise ValueError(f"{label}: {VLLM_PROMPT}, got {keys[0]!r} as {_what(prompt[keys[0]])}")
    raise ValueError(f"{label}: {VLLM_PROMPT}, got keys {keys}")


def require_list(name: str, value: object, shape: str) -> None:
    """ValueError "``name``: ``shape``, got a dict" for a value that is no list: a mapping (which
    would be read as its keys), None, a generator (which has no length)."""
    if isinstance(value, Mapping) or not isinstance(value, Sequence):
        raise ValueError(f"{name}: {shape}, got {_what(value)}")


def _listed(value: object) -> bool:
    """A list of items (a conversation's messages): a sequence, not text nor bytes (nor a mapping,
    which is no sequence), or an iterator (a generator of messages, read once)."""
    return isinstance(value, Iterator) or (
        isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)
    )


def _not_ids(value: object) -> str:
    """Why ``value`` is no list of token ids, as the end of a sentence: the first item that is no
    integer (", got a list" would say nothing of a list), or what it is instead."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        bad = next(i for i, t in enumerate(value) if not _is_token_id(t))
        return f": item {bad} is {value[bad]!r}"
    return f", got {_what(value)}"


def _what(value: object) -> str:
    """What a value given (as prompts, parameters, ...) is, for an error ("a dict", "an int")."""
    if isinstance(value, TokenSamplingParams):
        return "the scheduler's SamplingParams"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def of_context(i: int, message: str) -> str:
    """``message`` about context ``i`` of `score_many`: "context 1: ...", or "context 1, candidate
    2: ..." for one about a candidate, as the engine's problems with a candidate are named; one
    that names the context already ("context: is empty") says it once ("context 1: is empty")."""
    if message.startswith("candidate "):
        return f"context {i}, {message}"
    return f"context {i}: {message.removeprefix('context: ')}"


def is_token_list(value: object) -> bool:
    """A sequence of integers (numpy's too, as `SamplingParams` takes them): not text, nor bytes
    (a sequence of ints too, but of byte values)."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes | bytearray):
        return False
    # plain ints (nearly every prompt) are told by their types in C: the Integral check per
    # token cost 0.6 ms a 1k-token prompt
    return set(map(type, value)) == {int} or all(_is_token_id(t) for t in value)


def _is_token_id(value: object) -> bool:
    """An integer of any library (``np.int64``), not a bool (numpy's is no `Integral`)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_conversation(value: object) -> bool:
    return isinstance(value, Sequence) and bool(value) and isinstance(value[0], Mapping)
