"""What an `LLM` holds between its calls: the loaded model, its engine, the tokenizers that read
prompts, and the lock that lets one call run at a time; `close` lets go of them all."""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import NoReturn, Self, SupportsIndex

from radixflow.engine.engine import Engine
from radixflow.engine.trace_file import NOT_WRITTEN
from radixflow.generation.prompts import PromptReader, truncates
from radixflow.generation.setup import LoadedModel, load_model
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.options import EngineOptions
from radixflow.package import missing_torch_extra

ROUND_HISTORY = 256  # rounds the engine keeps (`Engine.rounds`): a long-lived LLM's stay bounded
CLOSED = "this LLM is closed: its engine was let go (make a new LLM)"
NOT_COPIED = (
    "an LLM cannot be copied or pickled: it holds a loaded model and its engine; "
    "make one LLM per thread or process (radixflow.LLM(model, ...) where it runs)"
)


class ModelHolder:
    """A model in an engine of its own, held until `close` (the base of `LLM`, whose calls step
    the engine one at a time under ``_busy``)."""

    def _open(self, options: EngineOptions) -> None:
        # named as the command line names it, not torch's bare "No module named 'torch'" from deep
        # in the options (every model the API loads has weights: the torch extra reads them)
        missing = missing_torch_extra("radixflow.LLM")
        if missing is not None:
            raise missing
        self.options = options
        self._model: LoadedModel | None = load_model(self.options)
        self._limited: TextTokenizer | None = None  # built on first use (it reads the vocabulary)
        self._engine: Engine | None = self._model.engine(round_history=ROUND_HISTORY)
        self._ids = itertools.count()
        # held while a call steps the engine: a second call meanwhile (another thread, or a
        # progress hook) would step it too, running the first call's requests unobserved
        self._busy = threading.Lock()

    @property
    def model(self) -> LoadedModel:
        """The model, its tokenizer and engine setup; RuntimeError once closed."""
        if self._model is None:
            raise RuntimeError(CLOSED)
        return self._model

    @property
    def engine(self) -> Engine:
        """The engine every call steps; RuntimeError once closed."""
        if self._engine is None:
            raise RuntimeError(CLOSED)
        return self._engine

    def close(self) -> None:
        """Let go of the engine and the model (their memory is freed once nothing else holds
        them; torch keeps freed GPU memory cached for reuse until `torch.cuda.empty_cache`) and
        write the trace. Closing twice does nothing; RuntimeError while a call runs (its requests
        would lose their engine)."""
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this LLM is running a call: close it once the call returns")
        try:
            if self._engine is not None:
                self._flush_trace()
            self._engine = self._model = self._limited = None
        finally:
            self._busy.release()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        # copy.copy made a second name for the same engine and lock (a copy per thread refused
        # the others' calls; closing it left the original open), and deepcopy and pickle failed
        # deep in the runner on the native kernels' ctypes handles
        raise TypeError(NOT_COPIED)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tokenizer(self) -> TextTokenizer:
        """The model's tokenizer; ValueError for a checkpoint without one (prompts as token ids)."""
        if self.model.tokenizer is None:
            raise ValueError(
                f"{self.model.name} has no tokenizer.json: text prompts, chat, stop strings, guided_choice "
                "and bad_words need the model's tokenizer; give prompts as lists of token ids"
            )
        return self.model.tokenizer

    @property
    def _read(self) -> PromptReader:
        """A reader of this call's prompts, made per call: one kept on the LLM would refer back
        to it (a cycle), and an LLM dropped without `close` would then hold its engine until the
        cycle collector ran."""
        return PromptReader(lambda: self.tokenizer, self._prompt_tokenizer)

    def _reader(self, params: object) -> PromptReader:
        """`_read`, or for a call whose ``params`` truncate prompts (``truncate_prompt_tokens``)
        one that tokenizes a text of any length: its end runs, as a token-id prompt's does (and
        the server's). A prompt of such a call whose params do not truncate is tokenized in full
        before the engine refuses it."""
        if not truncates(params):
            return self._read
        return PromptReader(lambda: self.tokenizer)

    def _prompt_tokenizer(self) -> TextTokenizer:
        """The tokenizer that reads prompts: it refuses a text whose length proves it too long for
        the model before tokenizing it (a huge text would take seconds), as the server's does."""
        tokenizer = self.tokenizer  # RuntimeError once closed, ValueError without one
        if self._limited is None:
            self._limited = tokenizer.limited(self.engine.runner.model.max_context)
        return self._limited

    def _flush_trace(self) -> None:
        """The trace (``trace_out``) holds every call so far: valid JSON after each one. One that
        stopped, at this flush or at one while a call ran (only logged there), is a warning after
        this call and each one after it: none of their rounds are in it."""
        try:
            self.model.setup.flush_trace()
        except OSError as e:
            said = f"radixflow: {NOT_WRITTEN}: {e.strerror or e}"  # named; the category says "warning"
            warnings.warn(said, RuntimeWarning, stacklevel=3)
