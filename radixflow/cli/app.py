"""Parser assembly and dispatch: user mistakes become one line and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import signal
import sys
import threading
from collections.abc import Container, MutableMapping
from typing import NoReturn, TextIO

from rich.console import Console

from radixflow.cli.args import HelpFormatter
from radixflow.cli.command import (
    StdoutUnwritable,
    UsageError,
    engine_left,
    stdout_writes,
    with_notes,
)
from radixflow.cli.commands import COMMANDS
from radixflow.cli.sigterm import SigtermAsCtrlC
from radixflow.options import EngineOptions
from radixflow.options.flags import flag_spellings
from radixflow.options.model_arg import MODEL_FLAG, settle_model, with_missing_model
from radixflow.package import package_version
from radixflow.plugins import PluginError
from radixflow.problems import ProblemError
from radixflow.server.config import Listen, ServerConfig

DESCRIPTION = (
    "`radixflow` command line: bench (policies side by side), models (the zoo), calibrate (fit the cost "
    "model to timed worker calls), cost (one worker call's predicted time, term by term), experiment "
    "(frozen experiment configs), generate (offline generation), score (candidates ranked after one "
    "context), serve (an OpenAI-compatible server) and run-batch (an OpenAI batch file through the "
    "server's routes, offline)."
)

# every option a command-line flag sets, by name -> its flag (the model is an argument of some commands)
FLAGS = {k: v for k, v in flag_spellings(EngineOptions, Listen, ServerConfig).items() if k != "model"}


class _Parser(argparse.ArgumentParser):
    _argv: tuple[str, ...] = ()  # what this parser was last asked to parse (`_dash_hint`)

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --repeat: ..." where an engine flag's check says "--kv-blocks:
        # ...": one wording for every flag
        message = message.removeprefix("argument ")
        raise UsageError(message + _dash_hint(message, self._argv))

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # a command's model, given as MODEL or as --model, is settled here, where each command's
        # own arguments are parsed (a subparser's call): once, for every command that takes one
        namespace = argparse.Namespace() if namespace is None else namespace
        self._argv = tuple(sys.argv[1:] if args is None else args)
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        except UsageError as e:  # argparse's "required" message names a model missing too
            raise UsageError(with_missing_model(str(e), namespace)) from None
        if (problem := settle_model(namespace)) is not None:
            self.error(problem)
        return namespace, extras


def _dash_hint(message: str, argv: tuple[str, ...]) -> str:
    """How to give the value a flag went without, where argparse read it as a flag of its own
    (``--logit-bias -1=2``: "expected one argument"): as ``--logit-bias=-1=2``; "" elsewhere."""
    flags, _, why = message.partition(": ")
    if why != "expected one argument":
        return ""
    spellings = flags.split("/")
    for word, after in itertools.pairwise(argv):
        if word in spellings and after.startswith("-") and after != "--":
            return f" (a value that begins with '-' is read as a flag: write {word}={after})"
    return ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's flags, or ``only`` that command's (the one argv
    names, `named_command`: the others' modules are not imported, `cli/commands.py`). The option
    registries a command's flags list (policy names, plugins') are read as its flags are declared."""
    # no abbreviations: a flag a command lacks (`score --candidates`) is named as unrecognised, not
    # taken for the one flag it begins (--candidates-file), whose error would blame a file never named
    p = _Parser(prog="radixflow", description=DESCRIPTION, formatter_class=HelpFormatter, allow_abbrev=False)
    p.add_argument("--version", action="version", version=f"radixflow {package_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for cmd in COMMANDS:
        parser = sub.add_parser(
            cmd.name, help=cmd.help, description=cmd.help, formatter_class=HelpFormatter, allow_abbrev=False
        )
        if only is None or cmd.name == only:
            cmd.add_arguments(parser)
    return p


def named_command(argv: list[str]) -> str:
    """The command ``argv`` names: its first word, the top level taking no option but ``-h`` and
    ``--version`` ("": none, as for ``radixflow --help``, whose listing needs no command's flags)."""
    return argv[0] if argv and not argv[0].startswith("-") else ""


def _spelling(param: str, model_flag: str | None) -> str:
    """A parameter as the command line spells it: an engine option by its flag (``kv_blocks`` ->
    ``--kv-blocks``); the model by ``model_flag`` where it was given as the flag (``--model``),
    as it is where it was given as the argument (MODEL); request fields as they are."""
    if param == "model" and model_flag is not None:
        return model_flag
    return FLAGS.get(param, param)


class _Console(Console):
    """rich's console, whose reader leaving early ends the command as a plain print's does (rich's
    own handling exits with status 1, a failure)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError

    def _write_buffer(self) -> None:
        # rich lets any other failed write out as a traceback; a full disk behind `> out.txt` is an
        # output that cannot be written. What stdout still buffers is dropped: the interpreter's
        # last flush of it would fail again at exit (a second message, and status 120)
        try:
            with stdout_writes():
                super()._write_buffer()
        except StdoutUnwritable:
            del self._buffer[:]  # not written again by the next print
            raise


def main(argv: list[str] | None = None, console: Console | None = None) -> int:
    """The command ``argv`` names (None: this process's command line, ``sys.argv``) run; its
    exit code."""
    if argv is None:  # the process's own command: its environment is the process's to default
        omp_wait_default(os.environ, sys.modules)
    try:
        return _command(argv, console or _Console())
    finally:
        if argv is None:  # the process's own command: what is left is the interpreter's exit
            _signals_end_it()


def omp_wait_default(environ: MutableMapping[str, str], modules: Container[str]) -> None:
    """OpenMP's idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user chose how they
    wait (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` given, kept as given). libgomp's default
    spins, and two torch threads spinning on a loaded 2-core machine made `generate` 1.5-2x
    slower (docs/usage.md, "OpenMP waits"). Only before torch is in ``modules``: libgomp reads
    the policy once, when torch loads it."""
    if "torch" in modules or "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return
    environ["OMP_WAIT_POLICY"] = "PASSIVE"


def _signals_end_it() -> None:
    """A Ctrl-C or a SIGTERM from now on ends the process at once, by the signal (130, 143 in a
    shell), what is written flushed first: the interpreter's exit takes a second or two with
    torch loaded, and Python's handler made a second Ctrl-C then a traceback under the command's
    one line ("Exception ignored in ... KeyboardInterrupt"). A signal ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # what cannot be written, the exit says
            stream.flush()
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def _command(argv: list[str] | None, console: Console) -> int:
    commands = {cmd.name: cmd for cmd in COMMANDS}
    # a SIGTERM or SIGHUP stops a command as a Ctrl-C does; a server's own handlers take them over
    # while it serves (it drains), and raise the first again on their way out, here
    term = SigtermAsCtrlC()
    args = None
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(named_command(argv)).parse_args(argv)
        args.argv = list(argv)  # the command as given, for what records it (`bench --json`)
        command = commands[args.command]
        with term:
            return command.run(args, console)
    except (UsageError, PluginError) as e:  # PluginError: a module RADIXFLOW_PLUGINS names
        return _ended(f"error: {e}", 2, e)
    except ProblemError as e:  # an option or input the engine's own checks refused
        spell = functools.partial(_spelling, model_flag=getattr(args, MODEL_FLAG, None))
        return _ended(f"error: {e.problem.render(spell)}", 2, e)
    except KeyboardInterrupt as e:  # a Ctrl-C, or a SIGTERM or SIGHUP taken as one
        return _ended(*term.ended(), e)
    except BrokenPipeError:  # the reader of stdout left early (`radixflow cost ... | head`)
        return _reader_left()


def _ended(said: str, code: int, error: BaseException) -> int:
    """``code``, once ``said`` and ``error``'s notes are one line on stderr; or the process ends
    here, with ``code``, where the command left its engine thread behind (`engine_left`)."""
    try:
        print(f"radixflow: {with_notes(said, error)}", file=sys.stderr, flush=True)
    except OSError:  # stderr gone (a hangup took the terminal): the exit code still says it
        _to_devnull(sys.stderr)
    if engine_left(error):
        with contextlib.suppress(OSError, ValueError):  # stdout gone too: the exit must still come
            sys.stdout.flush()
        os._exit(code)
    return code


def _reader_left() -> int:
    """End quietly, as SIGPIPE ends a shell tool: stdout now points at /dev/null, so the
    interpreter's last flush of what is still buffered cannot raise a second BrokenPipeError."""
    _to_devnull(sys.stdout)
    return 128 + signal.SIGPIPE


def _to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null, where a write to it failed: what it still
    buffers is then written there at the interpreter's exit, not failed again (a second message,
    and status 120). A stream without a descriptor is left as it is."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
