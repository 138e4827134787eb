"""Chat templates render as transformers renders them, and every failure of one is one line."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize(
    "source, expected",
    [
        # transformers' tojson: keys in their order, no HTML or ASCII escapes (Jinja's sorts and escapes)
        ("{{ messages[0] | tojson }}", '{"role": "user", "content": "a<b & \'ü\'"}'),
        ("{{ messages[1] | tojson(indent=1) }}", '{\n "role": "assistant",\n "content": "ok"\n}'),
        # loop controls ({% break %}, {% continue %}) are enabled
        (
            "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
            "a<b & 'ü'",
        ),
        # Llama 3 templates date the system prompt with strftime_now when it is defined
        ("{{ 'dated' if strftime_now is defined else 'undated' }}", "dated"),
    ],
)
def test_templates_render_in_transformers_environment(source: str, expected: str) -> None:
    """The prompt text, hence the tokens, is what transformers' apply_chat_template gives."""
    assert ChatTemplate(source, None, None).render(USER) == expected


TURNS = [
    {"role": "system", "content": "be terse"},
    {"role": "user", "content": " hi 😀 "},
    {"role": "assistant", "content": "yo"},
    {"role": "user", "content": "again"},
]


@pytest.mark.parametrize(
    "source",
    [
        # Mistral's and others' templates test the tools and documents apply_chat_template passes
        "{% if tools is not none %}TOOLS {% endif %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}",
        "{% if documents is not none %}DOCS {% endif %}{{ messages[0].content }}",
        # {% generation %} marks the assistant's text for training masks; rendering keeps its body
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]"
        "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
        # every named special token the tokenizer sets is in the template's namespace
        "[{{ pad_token }}|{{ unk_token }}|{{ eos_token }}|{{ bos_token }}]"
        "{{ 'sep' if sep_token is defined }}",
    ],
)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_a_template_sees_what_transformers_apply_chat_template_gives_it(
    tmp_path, source: str, generation_prompt: bool
) -> None:
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from radixflow.generation.tokenizer import TextTokenizer
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

    save_tokenizer(train_tokenizer(300), tmp_path, chat_template=source)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "unk_token": "<|im_end|>"}))
    ours = TextTokenizer.load(tmp_path).chat.render(TURNS, add_generation_prompt=generation_prompt)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours == ref.apply_chat_template(TURNS, tokenize=False, add_generation_prompt=generation_prompt)


@pytest.mark.parametrize("added_tokens_decoder", [False, True])
def test_special_tokens_of_a_legacy_special_tokens_map_reach_the_template(
    tmp_path, added_tokens_decoder
) -> None:
    """Older checkpoints keep their special tokens in special_tokens_map.json; transformers reads
    it over tokenizer_config.json unless that has an added_tokens_decoder (a newer save)."""
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from radixflow.generation.tokenizer import TextTokenizer
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

    source = (
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}|{{ pad_token }}"
    )
    save_tokenizer(train_tokenizer(300), tmp_path, chat_template=source)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config = {k: v for k, v in config.items() if not k.endswith("_token")}
    if added_tokens_decoder:
        config["added_tokens_decoder"] = {"1": {"content": "<|im_start|>", "special": True}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    specials = {"bos_token": {"content": "<|im_start|>", "lstrip": False}, "eos_token": "<|im_end|>"}
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({**specials, "pad_token": "<|endoftext|>"}))
    ours = TextTokenizer.load(tmp_path).chat.render(TURNS)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours == ref.apply_chat_template(TURNS, tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("with_config", [True, False])
def test_chat_template_jinja_is_the_template_as_in_transformers(tmp_path, with_config: bool) -> None:
    """A chat_template.jinja beside the tokenizer takes priority over the config's template (a
    newer save, or a fixed template), and is read without any tokenizer_config.json too."""
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from radixflow.generation.tokenizer import TextTokenizer
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

    save_tokenizer(train_tokenizer(300), tmp_path, chat_template="stale {{ messages[0].content }}")
    if not with_config:
        (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "chat_template.jinja").write_text("fixed {{ messages[-1].content }}", encoding="utf-8")
    ours = TextTokenizer.load(tmp_path).chat.render(TURNS)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours == ref.apply_chat_template(TURNS, tokenize=False, add_generation_prompt=True) == "fixed again"


@pytest.mark.parametrize("field", ["reasoning", "thinking", "reasoning_content"])
def test_a_messages_reasoning_reaches_the_template_under_each_name_as_in_transformers(
    tmp_path, field
) -> None:
    """Qwen3's template reads reasoning_content, gpt-oss's thinking; vLLM's newer replies name it
    reasoning. apply_chat_template fills each from whichever the message has."""
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from radixflow.generation.tokenizer import TextTokenizer
    from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer

    source = (
        "{% for m in messages %}{{ m.role }}:{{ m.reasoning_content }}/{{ m.thinking }}:"
        "{{ m.content }};{% endfor %}"
    )
    save_tokenizer(train_tokenizer(300), tmp_path, chat_template=source)
    turns = [TURNS[1], {"role": "assistant", "content": "yo", field: "thought"}, TURNS[3]]
    ours = TextTokenizer.load(tmp_path).chat.render(turns)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours == ref.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert "assistant:thought/thought:yo;" in ours


def test_every_kind_of_text_part_vllm_reads_is_joined_as_text() -> None:
    """OpenAI's assistant content may hold a ``refusal`` part (a reply replayed from the openai
    client does), and vLLM also reads plain strings and the Responses API's ``input_text`` and
    ``output_text`` parts as text: all were refused as "only text content parts are supported",
    though the same request renders on vLLM."""
    parts = [
        "plain",
        {"type": "text", "text": "text"},
        {"type": "input_text", "text": "input"},
        {"type": "output_text", "text": "output"},
        {"type": "refusal", "refusal": "no"},
    ]
    template = ChatTemplate("{% for m in messages %}{{ m.content }}|{% endfor %}", None, None)
    rendered = template.render([{"role": "assistant", "content": parts}])
    assert rendered == "plain\ntext\ninput\noutput\nno|"
    refusal = [{"role": "assistant", "content": [{"type": "refusal", "refusal": 5}]}]
    said = r"^messages\[0\]\.content\[0\]\.refusal: must be a string, got 5"
    with pytest.raises(ChatTemplateError, match=said):
        template.render(refusal)
    with pytest.raises(ChatTemplateError, match=r"^messages\[0\]\.content\[0\]: only text content parts"):
        template.render([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
