"""RadixFlow: an inference engine and scheduler for hybrid language models with exact-prefix caching.

``radixflow.LLM(model).generate(prompts, radixflow.SamplingParams(...))`` is the offline API;
``radixflow.LLM(model).score(context, candidates)`` scores candidates against one shared context.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LLM", "CandidateScore", "SamplingParams"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import radixflow` (and the CLI) stays light.
    if name in __all__:
        import radixflow.generation as generation

        return getattr(generation, name)
    raise AttributeError(f"module 'radixflow' has no attribute {name!r}")
