"""Offline byte-level BPE tokenizer for zoo models (no downloads).

Zoo models have random weights, so their tokenizer only has to be a real, reversible tokenizer
of the right vocabulary size: it is trained deterministically on a small English corpus that is
generated here, then padded with reserved special tokens up to the model's ``vocab_size`` (a few
KB of text cannot support thousands of merges). Ids 0-2 are ``<|endoftext|>``, ``<|im_start|>``,
``<|im_end|>`` as in SmolLM2, so ChatML prompts work the same way for zoo and real models.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = SPECIAL_TOKENS[0]
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_MIN_VOCAB = 256 + len(SPECIAL_TOKENS)  # byte alphabet + specials

_SENTENCES = """\
The quick brown fox jumps over the lazy dog.
A journey of a thousand miles begins with a single step.
The capital of France is Paris, and the capital of Japan is Tokyo.
Water boils at 100 degrees Celsius at sea level.
She opened the window and let the cool morning air fill the room.
Please summarize the following document in three sentences.
What is the weather like in London today? It is cloudy with a chance of rain.
The meeting has been moved to Thursday at 3:30 PM.
Our team shipped version 2.4.1 of the library last week.
He said, "I'll be there in ten minutes," but he arrived an hour late.
The cache stores key-value blocks for every prefix that has been computed.
Reranking models score each candidate document against the same query.
In 1969, astronauts landed on the Moon for the first time.
Photosynthesis converts sunlight, water and carbon dioxide into sugar and oxygen.
The recipe calls for two cups of flour, one egg and a pinch of salt.
Can you translate this sentence into Spanish, French and German?
The train to Berlin leaves from platform 7 at 08:15.
Machine learning models learn patterns from large amounts of data.
Don't forget to water the plants while we're away!
The library closes at nine o'clock on weekdays and at five on weekends.
If the temperature drops below zero, the lake will freeze.
Our customer support team answers questions within 24 hours.
The river winds through the valley before it reaches the sea.
Scientists measured the speed of light to be about 299,792 kilometers per second.
Once upon a time, there was a small village at the edge of a forest.
The function returns a list of integers sorted in ascending order.
Error: file not found. Check the path and try again.
Thank you for your message; we will get back to you soon.
The museum's new exhibition features paintings from the 19th century.
Every student must submit the assignment before Friday midnight.
def add(a, b):
    return a + b
for i in range(10):
    print(i * i)
{"name": "radixflow", "version": "0.1.0", "tags": ["cache", "scheduler"]}
User: How do I reset my password?
Assistant: Click "Forgot password" on the login page and follow the instructions.
"""


def _phrases(text: str) -> list[str]:
    """Phrase lists for the templated sentences are ``|``-separated strings, to stay compact."""
    return text.split("|")


_SUBJECTS = _phrases(
    "the teacher|my neighbor|a young engineer|the old fisherman|our manager|the students|"
    "a curious child|the doctor|her brother|the committee|the pilot|a famous writer|"
    "the gardener|the new intern|everyone"
)
_VERBS = _phrases(
    "reads|writes|builds|repairs|explains|paints|studies|visits|describes|measures|collects|"
    "answers|designs|finds|remembers"
)
_OBJECTS = _phrases(
    "a long letter|the broken bicycle|an interesting question|the history of Rome|"
    "a small wooden boat|the results of the experiment|three old maps|the city park|"
    "a difficult problem|the rules of chess|fresh bread|the annual report|a quiet song|"
    "the mountain trail|several new ideas"
)
_TIMES = _phrases(
    "every morning|on Sunday|after lunch|in the evening|last year|at night|before breakfast|"
    "during the summer|twice a week|in 2023|yesterday|today"
)
_PLACES = _phrases(
    "in the kitchen|near the station|at the university|by the river|in New York|on the farm|"
    "at the office|in a small cafe|under the bridge|in the garden"
)
_QUESTIONS = _phrases(
    "Why does {s} like {o}?|Where did {s} find {o}?|How often does {s} see {o}?|"
    "When will {s} finish {o}?|Who told {s} about {o}?"
)


def corpus() -> list[str]:
    """The training text, one line per sentence; deterministic (fixed seed, no I/O)."""
    lines = _SENTENCES.splitlines()
    rng = random.Random(20240601)
    for i in range(400):
        s, v, o = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
        t, p = rng.choice(_TIMES), rng.choice(_PLACES)
        if i % 5 == 4:
            lines.append(rng.choice(_QUESTIONS).format(s=s, o=o))
        else:
            sentence = f"{s} {v} {o} {p} {t}"
            lines.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "!", ", I think."]))
        if i % 7 == 0:
            price = f"${rng.randint(1, 99)}.{rng.randint(0, 99):02d}"
            lines.append(f"Item {i}: {rng.randint(1, 999)} units at {price}")
    return lines


@functools.lru_cache(maxsize=8)
def _trained_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    # The corpus supports only a few hundred merges: fill the rest with reserved special tokens.
    missing = vocab_size - tok.get_vocab_size()
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(missing)])
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, wanted {vocab_size}")
    return tok.to_str()


def train_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` with exactly ``vocab_size`` tokens.

    Deterministic: the same ``vocab_size`` always gives the same tokenizer.json.
    """
    if vocab_size < _MIN_VOCAB:
        raise ValueError(f"vocab_size must be >= {_MIN_VOCAB} (256 bytes + special tokens)")
    from tokenizers import Tokenizer

    return Tokenizer.from_str(_trained_json(vocab_size))


def save_tokenizer(
    tokenizer: Any,
    path: str | Path,
    *,
    eos_token: str = EOS_TOKEN,
    bos_token: str | None = EOS_TOKEN,
    chat_template: str | None = CHATML_TEMPLATE,
) -> None:
    """Write ``tokenizer.json`` and a minimal ``tokenizer_config.json`` (transformers can load it).
    A write that fails (a full disk) raises its OSError."""
    path = Path(path)
    # written here, not by the tokenizer's save: a write that fails (a full disk) is then an
    # OSError, not the bare Exception the tokenizers library raises
    (path / "tokenizer.json").write_text(tokenizer.to_str(pretty=True), encoding="utf-8")
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos_token,
        "pad_token": eos_token,
        "bos_token": bos_token,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template:
        config["chat_template"] = chat_template
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
