"""vLLM's tokenizer routes: ``GET /tokenizer_info``, ``POST /tokenize``, ``POST /detokenize``.

Scoring clients use ``/tokenize`` to find where a continuation starts, so it encodes exactly as
the generation routes do: a prompt as ``/v1/completions`` does, messages as
``/v1/chat/completions`` does; ``token_strs`` are the token texts ``echo`` reports.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request as HttpRequest

from radixflow.engine.runner import outside_vocabulary
from radixflow.generation.chat import ChatTemplateError
from radixflow.generation.detokenize import token_texts
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.server.errors import ApiError
from radixflow.server.json_body import FastJsonRoute
from radixflow.server.protocol_tokens import DetokenizeRequest, TokenizeRequest, check_specials_with_messages
from radixflow.server.state import ServerState
from radixflow.server.submission import while_connected

router = APIRouter(route_class=FastJsonRoute)


@router.get("/tokenizer_info")
async def tokenizer_info(http: HttpRequest) -> dict[str, object]:
    state = http.app.state.radixflow
    info = state.tokenizer.info
    return {
        "model": state.model_name,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "vocab_size": info.vocab_size,
        "model_max_length": state.context,
        "bos_token": info.bos_token,
        "eos_token": info.eos_token,
        "chat_template": info.chat_template,
    }


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, http: HttpRequest) -> dict[str, object]:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError(400, "give exactly one of prompt and messages", "prompt")
    check_specials_with_messages(body)
    # seconds for a long text: dropped if the client leaves while it waits for a thread, as a prompt is
    work = state.offload(_tokenize, body, state.unbounded_tokenizer)
    ids, strs = await while_connected(http, work)
    out: dict[str, object] = {"count": len(ids), "max_model_len": state.longest, "tokens": ids}
    if strs is not None:
        out["token_strs"] = strs
    return out


def _tokenize(body: TokenizeRequest, tokenizer: TextTokenizer) -> tuple[list[int], list[str] | None]:
    if body.messages is not None:
        try:
            text = tokenizer.chat.render(body.messages, body.add_generation_prompt)
        except ChatTemplateError as e:
            raise ApiError(400, str(e), e.param) from None
        ids = tokenizer.encode(text, add_special_tokens=False)
    else:
        ids = tokenizer.encode(body.prompt or "", add_special_tokens=body.add_special_tokens)
    return ids, token_texts(tokenizer, ids) if body.return_token_strs else None


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, http: HttpRequest) -> dict[str, object]:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    # the model's vocabulary, as every other door checks ids: one padded past the tokenizer's
    # last id (as Qwen's) takes and generates those ids, which decode to no text
    vocab = state.engine_info.vocab_size
    bad = next((t for t in body.tokens if not 0 <= t < vocab), None)
    if bad is not None:
        raise ApiError(400, f"tokens: {outside_vocabulary(bad, vocab)}", "tokens")
    return {"prompt": await while_connected(http, state.offload(state.tokenizer.decode, body.tokens))}
