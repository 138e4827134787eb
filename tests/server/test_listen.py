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


def test_a_second_server_on_the_port_of_one_still_loading_its_model_is_refused() -> None:
    """`bind` only bound the port, and uvicorn listened on it once the model had loaded: a second
    server started meanwhile (minutes, for a real model) bound it too, both sockets allowing
    reuse and neither listening, and then both listened on the one port, without a word, each
    answering some of its connections. Now the port listens from the bind on: the second is one
    line naming --port, as against a server already serving."""
    from radixflow.problems import ProblemError
    from radixflow.server.listen import bind, bound_port

    first = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ProblemError) as refused:
            bind("127.0.0.1", bound_port(first)).close()
        assert refused.value.problem.param == "port" and "already in use" in refused.value.problem.message
    finally:
        first.close()
