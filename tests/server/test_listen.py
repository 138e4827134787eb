"""server/listen.py: the URL a server's banner names is read back as `base_url` wrote it."""

from __future__ import annotations

import pytest

from radixflow.server.listen import announced_url, base_url


@pytest.mark.parametrize(
    ("model", "host"), [("qwen3_5-tiny", "127.0.0.1"), ("/models/on http://x/v1 me", "::1")]
)
def test_the_banner_names_the_url_it_was_written_with(model: str, host: str) -> None:
    banner = f"radixflow: serving {model} on {base_url(host, 8123)} (1 torch thread, 2 tokenizer threads)\n"
    assert announced_url(banner) == base_url(host, 8123).removesuffix("/v1")


@pytest.mark.parametrize("line", ["", "INFO: started\n", "radixflow: serving m on 127.0.0.1:80\n"])
def test_any_other_line_names_none(line: str) -> None:
    assert announced_url(line) is None
