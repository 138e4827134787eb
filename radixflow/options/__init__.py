"""One way in: `EngineOptions` (every engine setting, validated once) and `build_engine`.

Every entry point (the CLI commands, experiment TOML cells, `radixflow.LLM(...)`, the server)
builds its engine from an `EngineOptions` through `plan_engine` / `build_engine`.
"""

from radixflow.options.build import EnginePlan, EngineSetup, build_engine, plan_engine
from radixflow.options.choice import Capacity, RunnerChoice
from radixflow.options.engine_options import EngineOptions, option_fields, option_problem
from radixflow.options.runners import runner_name

__all__ = [
    "Capacity",
    "EngineOptions",
    "EnginePlan",
    "EngineSetup",
    "RunnerChoice",
    "build_engine",
    "option_fields",
    "option_problem",
    "plan_engine",
    "runner_name",
]
