"""Chat templates render as transformers renders them, and every failure of one is one line."""

from __future__ import annotations

import pytest

from radixflow.generation.chat import ChatTemplate, ChatTemplateError

USER = [{"role": "user", "content": "a<b & 'ü'"}, {"role": "assistant", "content": "ok"}]


@pytest.mark.parametrize(
    "source, error",
    [
        ("{{ messages[0]['content'] + 1 }}", r"TypeError: can only concatenate str"),
        ("{{ 1 // 0 }}", r"ZeroDivisionError: integer division"),
        ("{{ messages[5]['content'] }}", r"list object has no element 5"),
    ],
)
def test_a_template_that_fails_in_python_is_a_chat_template_error(source: str, error: str) -> None:
    """A template is code from the checkpoint: an error it raises while rendering is the
    template's failure (one line naming it), never a traceback from the server or the API."""
    with pytest.raises(ChatTemplateError, match=rf"^the chat template failed: {error}"):
        ChatTemplate(source, None, None).render(USER)
