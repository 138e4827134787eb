"""Generation on top of the engine: text in and out, stop strings, chat templates, the offline API."""

from radixflow.generation.calls import GenerationError
from radixflow.generation.llm import LLM
from radixflow.generation.outputs import GenerationOutput, StreamDelta, TokenLogprob
from radixflow.generation.params import SamplingParams
from radixflow.generation.scoring import CandidateScore

__all__ = [
    "LLM",
    "CandidateScore",
    "GenerationError",
    "GenerationOutput",
    "SamplingParams",
    "StreamDelta",
    "TokenLogprob",
]
