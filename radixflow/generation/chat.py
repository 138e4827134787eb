"""Chat messages -> prompt text through the model's Jinja chat template (as transformers renders it)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

# Roles every chat template is taken to know: it writes them, whether by name or verbatim.
BASE_ROLES = ("system", "user", "assistant")
# Roles a template knows only if it names them (a template that writes the role verbatim would
# otherwise put any string into the prompt as a turn the model never saw in training).
NAMED_ROLES = ("developer", "tool", "function", "ipython")
# Names a message's reasoning goes by, the one templates read first (transformers' order).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Content parts read as text, by type, and the field their text is in: OpenAI's text and refusal
# parts (an assistant reply replayed may hold a refusal) and the Responses API's, as vLLM reads them.
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
NO_TEMPLATE = "this model has no chat template"  # each door then says what to send instead


class ChatTemplateError(ValueError):
    """The conversation cannot be rendered: no template, bad messages, or the template refused.
    ``param`` is the request field at fault, as OpenAI's error body names it."""

    def __init__(self, message: str, param: str = "messages") -> None:
        super().__init__(message)
        self.param = param


def message_text(content: Any, where: str = "content") -> str:
    """A message's content: a string, or OpenAI's list of parts (`TEXT_PARTS`, or plain strings)
    whose texts are joined by a line break, as vLLM joins them (the same request renders the same
    prompt on both servers).
    ``where``: the content's field (``messages[2].content``), which an error names."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(_part_text(part, f"{where}[{j}]") for j, part in enumerate(content))
    if content is None:
        return ""
    why = f"{where}: must be a string or a list of text parts, got {_shown(content)}"
    raise ChatTemplateError(why, where)


def _part_text(part: Any, where: str) -> str:
    """A content part's text: a plain string, or a part of a kind vLLM reads as text (the same
    request renders the same prompt there); ChatTemplateError naming ``where``
    (``messages[0].content[1]``) for a part of another kind, or its text's field (``.text``) when
    that is not a string."""
    if isinstance(part, str):
        return part
    field = TEXT_PARTS.get(part.get("type")) if isinstance(part, Mapping) else None
    if field is None:
        raise ChatTemplateError(
            f"{where}: only text content parts ({{'type': 'text', 'text': ...}}) are supported, "
            f"got {_shown(part)}",
            where,
        )
    text = part.get(field)
    if not isinstance(text, str):
        got = "nothing" if text is None else _shown(text)
        raise ChatTemplateError(f"{where}.{field}: must be a string, got {got}", f"{where}.{field}")
    return text


def _shown(value: Any) -> str:
    """A bad value as JSON, cut to a readable length (an error names it in one line)."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):  # the offline API takes Python values
        text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


class ChatTemplate:
    def __init__(
        self,
        source: str | None,
        bos_token: str | None,
        eos_token: str | None,
        special_tokens: Mapping[str, str | None] | None = None,
    ) -> None:
        """``special_tokens``: the tokenizer's other named special tokens (``pad_token``, ...)."""
        self.source = source
        # the other named tokens as transformers' special_tokens_map gives them: only those set;
        # bos and eos always, "" when unset (a template writing `bos_token + ...` still renders)
        others = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        self._specials = {**others, "bos_token": bos_token or "", "eos_token": eos_token or ""}

    @property
    def available(self) -> bool:
        return self.source is not None

    @functools.cached_property
    def roles(self) -> tuple[str, ...]:
        """The message roles this template knows: the base ones and those it names as literals."""
        source = self.source or ""
        named = tuple(r for r in NAMED_ROLES if f"'{r}'" in source or f'"{r}"' in source)
        return BASE_ROLES + named

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (each with "role" and "content")."""
        if self.source is None:
            raise ChatTemplateError(
                f"{NO_TEMPLATE}: send a plain prompt instead of messages (LLM.generate, /v1/completions)"
            )
        if not messages:
            raise ChatTemplateError("messages must not be empty")
        plain = [self._plain(i, m) for i, m in enumerate(messages)]
        import jinja2

        try:
            template = _compile(self.source)
            # tools and documents are None as apply_chat_template passes them: a template testing
            # `tools is not none` (Mistral's) would otherwise take an undefined one for a tool list
            return template.render(
                **self._specials,
                messages=plain,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template failed: {e}") from None
        except Exception as e:  # the template is the checkpoint's code: whatever it raises is its failure
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None

    def _plain(self, i: int, m: Any) -> dict[str, Any]:
        """Message ``i`` as the template reads it (its content as text), once it is one the
        template can render; ChatTemplateError naming the field (``messages[i].role``) if not."""
        if not isinstance(m, Mapping):
            raise ChatTemplateError(f"messages[{i}]: must be an object, got {_shown(m)}", f"messages[{i}]")
        role = m.get("role")
        if not isinstance(role, str):
            got = "nothing" if role is None else _shown(role)
            raise ChatTemplateError(f"messages[{i}].role: must be a string, got {got}", f"messages[{i}].role")
        if role not in self.roles:
            raise ChatTemplateError(
                f"messages[{i}].role: unknown role {role!r}; this model's chat template "
                f"knows {', '.join(self.roles)}",
                f"messages[{i}].role",
            )
        return {**_with_reasoning(m), "content": message_text(m.get("content"), f"messages[{i}].content")}


def _with_reasoning(m: Mapping[str, Any]) -> dict[str, Any]:
    """``m`` with its reasoning under each name templates read, as transformers fills them:
    ``reasoning_content`` (Qwen3's) always, ``thinking`` (gpt-oss's) unless given; whichever of
    the three names the message uses (vLLM's newer replies say ``reasoning``)."""
    reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
    if reasoning is None:
        return dict(m)
    return {"thinking": reasoning, **m, "reasoning_content": reasoning}


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` filter: keys in their order, no HTML or ASCII escapes (Jinja's own
    sorts the keys and escapes ``<>&'`` and non-ASCII, which would change the prompt's tokens)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def compile_problem(source: str) -> str | None:
    """Why ``source`` does not compile as a chat template ("line 1: Expected an expression, ..."),
    None when it does: such a template can render no conversation, a fault of the checkpoint."""
    import jinja2

    try:
        _compile(source)
    except jinja2.TemplateSyntaxError as e:
        return f"line {e.lineno}: {e.message}"
    return None


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    """A sandboxed template (a checkpoint's template is untrusted input), compiled once, in the
    environment transformers' ``apply_chat_template`` gives it (loop controls, ``tojson``,
    ``strftime_now``), so a template renders the same prompt text here as there."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    extensions = [_generation_tag(), loopcontrols]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def _generation_tag() -> Any:
    """transformers' ``{% generation %}...{% endgeneration %}`` tag (it marks the assistant's text
    for training masks): renders its body unchanged. Without it such a template does not compile."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    return Generation
