"""Known OpenAI and vLLM request fields the server does not implement, and why.

- ``IGNORED``: accepted, but they cannot change the answer here (bookkeeping, hints);
- ``*_REFUSED``: fields for something the engine does not do; a value that asks for it is a 400
  naming the field, a value that asks for nothing (null, the default, ``tools: []``) is accepted.
"""

from __future__ import annotations

from radixflow.server.strict import Refused

# Accepted and unused: none of them changes what is generated.
IGNORED = {
    "user": "an end-user id for the provider's abuse monitoring",
    "safety_identifier": "the same, OpenAI's newer name",
    "prompt_cache_key": "a routing hint for OpenAI's prompt cache; the radix cache finds prefixes itself",
    "prompt_cache_options": "breakpoints and lifetimes for OpenAI's prompt cache; the same",
    "prompt_cache_retention": "how long OpenAI keeps cached prefixes; the same",
    "service_tier": "a billing tier",
    "metadata": "tags for stored completions (nothing is stored)",
    "parallel_tool_calls": "only matters with tools, which are refused",
}

STRUCTURED = "structured output is not implemented beyond guided_choice"
_TOOLS = "tool calling is not implemented"

# Both generation routes: OpenAI's sampling fields the engine lacks, then vLLM's extensions.
COMMON_REFUSED = {
    "response_format": Refused(f'{STRUCTURED} (only {{"type": "text"}})', ({"type": "text"},)),
    "use_beam_search": Refused("beam search is not implemented", (False,)),
    "length_penalty": Refused("beam search is not implemented", (1,)),
    "guided_json": Refused(STRUCTURED),
    "guided_regex": Refused(STRUCTURED),
    "guided_grammar": Refused(STRUCTURED),
    "logits_processors": Refused("logits processors are not implemented", ([],)),
    "spaces_between_special_tokens": Refused("not implemented: tokens decode as the tokenizer says", (True,)),
    "priority": Refused("request priorities are not implemented (the policy orders requests)", (0,)),
    "return_token_ids": Refused(
        "not implemented: logprobs with return_tokens_as_token_ids name them", (False,)
    ),
    "vllm_xargs": Refused("logits processors are not implemented", ({},)),
}

COMPLETION_REFUSED = {
    **COMMON_REFUSED,
    "suffix": Refused("suffixes (insertion) are not implemented", ("",)),
    "prompt_embeds": Refused("prompt embeddings are not implemented (send text or token ids)"),
}

# Inside ``stream_options``
STREAM_REFUSED = {
    "continuous_usage_stats": Refused(
        "usage in every chunk is not implemented (include_usage sends it once, at the end)", (False,)
    ),
}

# How messages become a prompt is the model's chat template's business alone.
TEMPLATE_REFUSED = {
    "tools": Refused(_TOOLS, ([],)),
    "chat_template": Refused("not implemented: the model's own chat template is always used"),
    "chat_template_kwargs": Refused("chat template arguments are not implemented", ({},)),
    "continue_final_message": Refused("not implemented: a reply starts a new turn", (False,)),
    "documents": Refused("documents for the chat template are not implemented", ([],)),
}

# ``/v1/score`` answers once, whole: a client asking for server-sent events would read none.
SCORE_REFUSED = {
    **TEMPLATE_REFUSED,
    "stream": Refused("not implemented for /v1/score (the answer comes whole)", (False,)),
}

CHAT_REFUSED = {
    **COMMON_REFUSED,
    **TEMPLATE_REFUSED,
    "tool_choice": Refused(_TOOLS, ("none", "auto")),
    "functions": Refused(_TOOLS, ([],)),
    "function_call": Refused(_TOOLS, ("none", "auto")),
    "audio": Refused("audio output is not implemented"),
    "modalities": Refused("only text output is implemented", (["text"],)),
    "prediction": Refused("predicted outputs are not implemented"),
    "reasoning_effort": Refused("reasoning effort is not implemented (only none)", ("none",)),
    "verbosity": Refused("verbosity control is not implemented", ("medium",)),
    "web_search_options": Refused("web search is not implemented"),
    "moderation": Refused("moderation is not implemented (nothing is scored or blocked)"),
    "store": Refused("not implemented: completions are not stored", (False,)),
    "echo": Refused("not implemented for chat (echo is a /v1/completions feature)", (False,)),
    "add_special_tokens": Refused("not implemented: the chat template writes them", (False,)),
}
