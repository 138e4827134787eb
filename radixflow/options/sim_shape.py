"""The shape the sim costs for a model name: a sim catalogue shape, a torch zoo name, or a checkpoint.

The sim can take any model the torch runner can load, so the real runner's regime can be explored
deterministically on any profile: a zoo name is read from the preset config the zoo builds it from
(no weights are built), a checkpoint directory from its ``config.json``. Both go through the same
config readers as the GPU-scale catalogue (`costmodel.shape.hf_config`), and the context length is
the one the torch runner would allow, so a prompt the sim accepts is one the torch runner accepts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from radixflow.costmodel.shape.hf_config import UnknownModelTypeError, language_config, shape_from_config
from radixflow.costmodel.shape.limits import DEFAULT_CONTEXT, layer_count_problem, shape_problem
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.jsonl import json_value
from radixflow.options.machine import path_length_problem
from radixflow.problems import Problem, ProblemError
from radixflow.user_paths import expand_home


def zoo_names() -> list[str]:
    """The torch zoo's names (pure: the zoo's table, no family module imported)."""
    from radixflow.models.zoo_catalogue import model_names

    return model_names()


def is_checkpoint(name: str) -> bool:
    return (Path(expand_home(name)) / "config.json").is_file()


def sim_name_problem(name: str) -> Problem | None:
    """Why ``name`` is no model the sim can cost (None: it may be). Cheap: nothing is read."""
    if (problem := path_length_problem("model", name)) is not None:  # before the os is asked of it
        return problem
    from radixflow.models.zoo import file_problem, shadow_problem  # no torch: path checks only

    if (shadowed := shadow_problem(name)) is not None:  # as the torch runner refuses the name
        return Problem("model", shadowed)
    if name in SIM_MODELS or name in zoo_names() or is_checkpoint(name):
        return None

    # a checkpoint's config.json given for its directory is named so, as the torch runner names it
    why = file_problem(Path(expand_home(name)))
    return Problem("model", why or f"unknown sim model {name!r} ({known_models()})")


def known_models() -> str:
    return (
        f"sim shapes: {', '.join(SIM_MODELS)}; zoo names: {', '.join(zoo_names())}; "
        "or a checkpoint directory with config.json"
    )


def sim_shape(name: str) -> ModelShape:
    """The shape of ``name``: a catalogue shape as it is, else the zoo's or checkpoint's config
    read as the torch runner would load it. Raises `ProblemError` on ``model``."""
    if name in SIM_MODELS:
        return SIM_MODELS[name]
    problem = sim_name_problem(name)
    if problem is not None:
        raise ProblemError(problem)
    config, source = _zoo_config(name) if name in zoo_names() else _checkpoint_config(name)
    problem = layer_count_problem(language_config(config))
    if problem is not None:
        raise ProblemError(Problem("model", f"{name}: config.json {problem}"))
    try:
        shape = shape_from_config(name, config, source)
        context = int(language_config(config).get("max_position_embeddings") or DEFAULT_CONTEXT)
    except UnknownModelTypeError as e:
        raise ProblemError(Problem("model", f"{name}: {e}")) from None
    except KeyError as e:
        raise ProblemError(Problem("model", f"{name}: config.json has no {e.args[0]!r}")) from None
    except (TypeError, ValueError, ArithmeticError) as e:  # ArithmeticError: a head count of 0, int(inf)
        raise ProblemError(Problem("model", f"{name}: config.json cannot be read as a shape ({e})")) from None
    # the context the torch runner allows, and the hidden-state row its KV pool keeps per position
    shape = replace(shape, max_context=context, cached_hidden=True)
    problem = shape_problem(shape)
    if problem is not None:
        raise ProblemError(Problem("model", f"{name}: config.json {problem}"))
    if name not in zoo_names():
        _check_as_torch_loads(config, source)
    return shape


def model_context(name: str) -> int | None:
    """The context of model ``name`` as its runner will read it, known before any runner is built
    (None: a checkpoint whose config the cost model cannot read; the torch runner still runs it)."""
    try:
        return sim_shape(name).max_context
    except ProblemError:
        return None


def _zoo_config(name: str) -> tuple[dict[str, Any], str]:
    """The preset config the zoo builds ``name`` from (imports its family module, builds nothing)."""
    from radixflow.models.zoo_catalogue import ModelUnavailableError, preset_config

    try:
        return preset_config(name), f"zoo preset {name}"
    except ModelUnavailableError as e:
        raise ProblemError(Problem("model", str(e))) from None


def _check_as_torch_loads(config: dict[str, Any], source: str) -> None:
    """Refuse the checkpoint's config where and as the torch loader refuses it (a quantized one;
    its family's schema): the cost model's readers take more (``"64"`` or 64.0 for 64), the torch
    runner does not. Checked after the cost model's own limits, whose words name the shape at
    fault; a model_type no torch family reads (the sim costs some) is left to those alone."""
    # pure schemas: no torch imported
    from radixflow.models.families.config_check import SCHEMAS, config_problem, quantized_problem

    language = language_config(config)
    if str(language.get("model_type")) in SCHEMAS and config.get("quantization_config") is not None:
        problem: Problem | None = quantized_problem(config["quantization_config"])
    else:
        problem = config_problem(language)
    if problem is not None:
        raise ProblemError(Problem("model", f"{Path(source) / 'config.json'}: {problem}"))


def _checkpoint_config(name: str) -> tuple[dict[str, Any], str]:
    path = Path(expand_home(name)) / "config.json"
    try:
        config = json_value(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, 4300+ digit ints, nesting
        raise ProblemError(Problem("model", f"cannot read {path}: {e}")) from None
    if not isinstance(config, dict):
        raise ProblemError(Problem("model", f"{path} does not hold a JSON object"))
    return config, str(path.parent)
