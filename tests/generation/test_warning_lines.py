"""The `LLM`'s Python warnings name their source (`radixflow: `; Python's display adds the category,
"UserWarning: radixflow: ..."): a warning raised at the caller's line (``stacklevel``) shows the
caller's file, not radixflow."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

from radixflow.cli.args import trace_failure_held
from radixflow.generation.holder import ModelHolder


def _fail() -> None:
    raise OSError(28, "No space left on device")


def _unwritten(caught: list[warnings.WarningMessage]) -> None:
    holder = SimpleNamespace(model=SimpleNamespace(setup=SimpleNamespace(flush_trace=_fail)))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ModelHolder._flush_trace(holder)  # type: ignore[arg-type]
        with trace_failure_held():  # a command says it in a line of its own once its work is done
            ModelHolder._flush_trace(holder)  # type: ignore[arg-type]
    caught.extend(got)


def test_a_trace_the_llm_cannot_write_is_a_prefixed_warning_a_command_holds_back() -> None:
    caught: list[warnings.WarningMessage] = []
    _unwritten(caught)
    said = [(w.category, str(w.message)) for w in caught]
    unwritten = "radixflow: the trace was not written: No space left on device"
    assert said == [(RuntimeWarning, unwritten)]
