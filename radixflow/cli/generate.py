"""`radixflow generate MODEL --prompt ...`: the offline API from the command line (its flags are
`cli/generate_flags.py`'s); the outputs printed as text or JSON."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from radixflow.cli.args import (
    check_output_paths,
    engine_inputs,
    note_trace_kept,
    require_tokenizer,
    trace_failure_held,
    warn_ineffective_for_model,
    warn_ineffective_options,
    warn_trace_unwritten,
    write_trace,
)
from radixflow.cli.command import (
    UsageError,
    not_utf8,
    print_finished,
    stdout_writes,
    with_notes,
    write_stdout,
)
from radixflow.cli.extras import require_torch_extra
from radixflow.cli.generate_flags import sampling_flag, sampling_params
from radixflow.cli.serve_setup import refuse_setup
from radixflow.options.flags import from_args
from radixflow.problems import ProblemError, counted
from radixflow.progress import LoggedProgress, RequestBar
from radixflow.server.responses.logprobs import finite_logprob

if TYPE_CHECKING:
    from radixflow.generation.outputs import GenerationOutput, TokenLogprob


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow generate")
    from radixflow.generation import LLM, GenerationError
    from radixflow.generation.calls import PromptError
    from radixflow.generation.chat import ChatTemplateError

    options = from_args(args)
    if options.trace_out is not None:
        check_output_paths({"--trace-out": Path(options.trace_out)}, engine_inputs(options))
    params = sampling_params(args)
    problem = params.problem()  # before the model loads; the vocabulary's bounds are checked after
    if problem is not None:
        raise UsageError(problem.render(sampling_flag))
    _check_prompts(args.prompt)
    refuse_setup(options)  # what the model's setup refuses, before a warning of the run
    warn_ineffective_options(args, options)  # of a run that goes ahead: after the refusals
    llm = None
    finished: dict[int, GenerationOutput] = {}  # each output as it finishes, by its place
    try:
        llm = LLM.from_options(options)
        require_tokenizer(llm, "--prompt is text, which needs", "token-id prompts run through radixflow.LLM")
        warn_ineffective_for_model(args, llm.model.setup.choice.has_recurrent)
        outputs = _answers(args, llm, params, finished)
    except ProblemError:
        raise
    except KeyboardInterrupt as e:  # a Ctrl-C, or a SIGTERM taken as one: the trace is written
        if finished:
            _print_finished(args, console, llm, finished, e)
        note_trace_kept(None if llm is None else llm.model.setup, e)
        raise
    except PromptError as e:  # found once the model loaded: named by its flag, as before it
        said = e.render(sampling_flag)
        raise UsageError(_of_prompt(said) if e.problem.param == "prompt" else said) from None
    except (ChatTemplateError, ValueError) as e:
        raise UsageError(_of_prompt(str(e))) from None
    except GenerationError as e:  # a round failed: what finished before it is still printed
        if finished:
            _print_finished(args, console, llm, finished, e)
        print(f"radixflow: {with_notes(f'error: {e}', e)}", file=sys.stderr)
        warn_trace_unwritten(llm.model.setup)  # the LLM ran (its run failed): after that line
        return 1
    _print_outputs(args, console, llm, outputs)
    write_trace(llm.model.setup)  # after the answers: a trace the disk refuses costs none of them
    return 0


def _of_prompt(said: str) -> str:
    """``said`` with the flag named where it is said of one prompt of several ("prompt 1: is
    empty"), as a lone prompt's refusal names it ("--prompt: is empty")."""
    return f"--prompt: {said}" if re.match(r"prompt \d+: ", said) else said


def _check_prompts(prompts: list[str]) -> None:
    """`UsageError` naming ``--prompt`` for text with no UTF-8 form (a command line's byte that
    is not UTF-8), before the model loads, as ``score --context`` is refused (the API's refusal,
    once the model had loaded, named a "prompt" and a character counted from 0)."""
    for i, prompt in enumerate(prompts):
        said = not_utf8(prompt)
        if said is not None:
            raise UsageError(f"--prompt: {'' if len(prompts) == 1 else f'prompt {i} is '}{said}")


def _answers(
    args: argparse.Namespace, llm: Any, params: Any, finished: dict[int, GenerationOutput]
) -> list[GenerationOutput]:
    """Every output, in order, each put in ``finished`` (by its place) as it finishes: what a run
    cut short keeps."""
    with LoggedProgress(console=Console(stderr=True)) as progress, trace_failure_held():
        hear = RequestBar(progress, "generating").hear
        fit = args.max_tokens is None  # a default: it never fails where the prompt fits
        if args.chat:
            convs = [[{"role": "user", "content": p}] for p in args.prompt]
            return llm.chat(convs, params, progress=hear, fit=fit, on_output=finished.__setitem__)
        return llm.generate(list(args.prompt), params, progress=hear, fit=fit, on_output=finished.__setitem__)


def _print_finished(
    args: argparse.Namespace,
    console: Console,
    llm: Any,
    finished: dict[int, GenerationOutput],
    stopped: BaseException,
) -> None:
    """The outputs a run ``stopped`` cut short (a Ctrl-C, a failed round) had finished, printed as
    a whole run prints them (in ``--json``'s list each at its place, null for the others);
    ``stopped`` gets a note saying so, or why they could not be."""
    total = len(args.prompt) * args.n
    others = ", null for the others" if args.json else ""
    said = f"{len(finished)} of {counted(total, 'output')} finished, printed above{others}"
    show = functools.partial(_print_outputs, args, console, llm, [finished.get(i) for i in range(total)])
    print_finished(stopped, show, f"{said} (the same command runs them all again)")


def _print_outputs(
    args: argparse.Namespace, console: Console, llm: Any, outputs: Sequence[GenerationOutput | None]
) -> None:
    """Each output (None: one not finished, null in ``--json``'s list, else left out)."""
    if args.json:
        write_stdout(json.dumps([None if o is None else as_json(o) for o in outputs], indent=2) + "\n")
        return
    for i, out in enumerate(outputs):
        if out is None:
            continue
        label = (f"choice {out.choice}: ", "dim") if args.n > 1 else ("", "")
        _show(console, label, (_prompt_that_ran(args, llm, i // args.n, out), "bold"), (out.text, ""))
        console.print(
            f"[dim]{counted(len(out.token_ids), 'token')}, finish reason {out.finish_reason}, "
            f"{counted(out.cached_tokens, 'prompt token')} from the cache[/dim]",
            highlight=False,
        )
        if out.prompt_logprobs is not None:
            scored = [e.logprob for e in out.prompt_logprobs if e is not None]
            console.print(f"[dim]prompt logprob {sum(scored):.4f} over {counted(len(scored), 'token')}[/dim]")
        if out.logprobs is not None:
            total = sum(e.logprob for e in out.logprobs)
            console.print(f"[dim]output logprob {total:.4f} over {counted(len(out.logprobs), 'token')}[/dim]")


def _show(console: Console, *parts: tuple[str, str]) -> None:
    """(text, style) parts as one line: on a terminal as rich Text, unwrapped (no markup or emoji
    code read in it, no newline put in it); to a file or a pipe as they are, byte for byte (rich
    would turn a tab into spaces and drop a carriage return)."""
    if console.is_terminal:
        console.print(Text.assemble(*parts), soft_wrap=True)
    else:
        with stdout_writes():  # a full disk behind `> out.txt`: one line, as rich's writes say it
            console.file.write("".join(text for text, _ in parts) + "\n")


def _prompt_that_ran(args: argparse.Namespace, llm: Any, i: int, out: GenerationOutput) -> str:
    """Prompt ``i`` as given, or with ``--truncate-prompt-tokens`` the end of it that ran ("..."
    before it), so the printed text is what the output continues."""
    if args.truncate_prompt_tokens is None or args.chat:  # a chat prompt is printed as the message
        return args.prompt[i]
    full = llm.tokenizer.encode(args.prompt[i])
    if len(full) <= len(out.prompt_token_ids):
        return args.prompt[i]
    return "..." + llm.tokenizer.decode(out.prompt_token_ids, skip_special_tokens=True)


def as_json(out: GenerationOutput) -> dict[str, Any]:
    """One output as JSON-ready data; prompt logprobs as a list (None for the first token)."""
    data = asdict(replace(out, logprobs=None, prompt_logprobs=None))
    data["stop_reason"] = out.stop_reason  # a property: vLLM's name, the one the server's answers use
    if out.logprobs is not None:
        data["logprobs"] = [_entry(e) for e in out.logprobs]
    if out.prompt_logprobs is not None:
        data["prompt_logprobs"] = [None if e is None else _entry(e) for e in out.prompt_logprobs]
    return data


def _entry(token: TokenLogprob) -> dict[str, Any]:
    """One token's logprobs as JSON-ready data; a logprob JSON cannot hold (-inf: a logit a
    float16 model overflowed) is the stand-in `score` and the server answer, -9999 (Python
    writes -Infinity, which a strict reader refuses with the whole list)."""
    top = [[t, finite_logprob(lp)] for t, lp in token.top]
    return {**asdict(token), "logprob": finite_logprob(token.logprob), "top": top}
