"""`EngineOptions`: everything that says how an engine is built, declared once.

Each field carries its `OptionSpec` (help, limits, choices) in its metadata, so the command-line
flags (`radixflow.options.flags`), the mapping form used by TOML cells and `radixflow.LLM(**kwargs)`
(`from_mapping`) and the one `validate()` all read the same declaration: an option added here
appears at every door with the same default, help and error. The fields are declared by their
group, each in its own module (`ModelOptions`, `SchedulerOptions`, `SimOptions`), in that order;
the output options are declared here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radixflow.options.machine import (
    bookkeeping_problem,
    output_problem,
    path_length_problem,
    threads_problem,
)
from radixflow.options.model_options import ModelOptions
from radixflow.options.scheduler_options import SchedulerOptions
from radixflow.options.sim_options import SimOptions, hardware_problem
from radixflow.options.spec import check_value, checked, fields_problem, numbers_as_held, option
from radixflow.options.spec import spec_of as spec_of  # where the flags and tests read it
from radixflow.problems import Problem, ProblemError
from radixflow.runners.matmul_plan import plan_problem
from radixflow.scheduler.config import budget_problem
from radixflow.user_paths import expand_home

PATH_OPTIONS = ("hardware", "trace_out")  # options that may name a file (`expand_home`)
FILE_OPTIONS = ("model", *PATH_OPTIONS)  # and a checkpoint directory: each a path the os is asked of


# the bases in reverse: a dataclass's fields are its bases' from the last, so model options come first
@dataclass(frozen=True)
class EngineOptions(SimOptions, SchedulerOptions, ModelOptions):
    trace_out: str | None = option(
        None,
        "write the dependency trace (rounds, chunks, producers and their consumers, bubbles) to this "
        "file as Chrome/Perfetto trace JSON; open it in ui.perfetto.dev (bench: a process per policy "
        "run; default: no trace)",
        str,
        group="output",
        metavar="PATH",
    )

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        numbers_as_held(self)  # tflops=100 held as 100.0, as --tflops 100 holds it
        # a file's leading ~ is the home directory at every door (LLM(...), TOML, --flag=~/x,
        # which no shell expands), as a model path's is where the loader reads it
        for name in PATH_OPTIONS:
            value = getattr(self, name)
            if isinstance(value, str):  # a wrong type is the type check's to refuse
                object.__setattr__(self, name, expand_home(value))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, local: bool = True, **overrides: Any) -> EngineOptions:
        """Options from a mapping (a TOML cell, `LLM(**kwargs)`): keys are field names, values must
        have the field's type (an int field given 4.5, "4" or True is refused, not cast).

        Raises `ProblemError` naming the first bad key; the result is validated (``local``: see
        `validate`).
        """
        options = checked(cls, {**data, **overrides})
        options.check(local)
        return options

    def replace(self, **changes: Any) -> EngineOptions:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ validation
    def validate(self, local: bool = True) -> Problem | None:
        """Why these options cannot build an engine (None when they can): every field's type,
        range and choices, the budgets against each other, and this machine's limits. Reads the
        machine (CPU count, available memory); allocates nothing. ``local`` False: the engine is
        built on another machine (a Ray cluster's replica), whose own check holds it to its own
        CPUs and memory, so this machine's are not read."""
        return (
            fields_problem(self)
            or next(filter(None, (path_length_problem(n, getattr(self, n)) for n in FILE_OPTIONS)), None)
            or budget_problem(self.token_budget, self.block_size)
            or (threads_problem(self.torch_threads) if local else None)
            or plan_problem(self.matmul)
            or (bookkeeping_problem(self.kv_blocks, self.state_slots) if local else None)
            or output_problem("trace_out", self.trace_out)
            or hardware_problem(self.hardware)
        )

    def check(self, local: bool = True) -> None:
        """`validate`, raising `ProblemError`."""
        problem = self.validate(local)
        if problem is not None:
            raise ProblemError(problem)


def option_fields() -> tuple[dataclasses.Field[Any], ...]:
    """Every engine option, in declaration order."""
    return dataclasses.fields(EngineOptions)


def option_problem(name: str, value: Any) -> Problem | None:
    """Why ``value`` cannot be the option ``name`` (None: it can), by its declaration alone (type,
    range, choices): a value a door takes in a form of its own (an experiment's list of seeds)
    told what every other door is told."""
    (f,) = [f for f in option_fields() if f.name == name]
    return check_value(name, value, spec_of(f), f.default is None)
