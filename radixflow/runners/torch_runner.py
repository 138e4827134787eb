"""Real runner: one packed PyTorch forward per round over the chunks the scheduler chose."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import torch

from radixflow.costmodel.shape.limits import DEFAULT_CONTEXT
from radixflow.engine.clocks import round_clock
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.io.eos_ids import eos_token_ids
from radixflow.models.io.loader import load_model
from radixflow.models.kernels.backend import Kernels, KernelsError, resolve_kernels
from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import use_kernels
from radixflow.models.seq_spec import SeqSpec, Snapshot
from radixflow.problems import Problem, ProblemError
from radixflow.runners.matmul import MatmulPlan, MatmulRouter, install, parse_plan
from radixflow.runners.matmul_measure import calibrated_plan, dominant_weight, measure_plan
from radixflow.runners.profile_store import RunnerSettings, load_stored, store_key, stored_routes
from radixflow.runners.prompt_logprobs import PromptScorer
from radixflow.runners.round_predictor import LearnedRoundPredictor, make_predictor
from radixflow.runners.sampler import Sampler, SampleRow
from radixflow.runners.torch_settings import routes_matmuls, settings_problem, thread_count
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request


def _spec(chunk: ScheduledChunk) -> SeqSpec:
    return SeqSpec(
        start=chunk.start,
        length=chunk.length,
        block_table=list(chunk.block_table),
        restore_slot=chunk.restore_slot,
        snapshots=[Snapshot(s.position, s.slot) for s in chunk.snapshots],
    )


class TorchRunner:
    name = "torch"

    def __init__(
        self,
        path: str | Path,
        block_size: int,
        num_blocks: int,
        num_slots: int,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        label: str | None = None,
        seed: int = 0,
        batched_decode: bool = True,
        matmul: str = "auto",
        predict_rounds: bool = True,
        clock: str = "wall",
        kernels: str = "auto",
    ) -> None:
        """``seed`` seeds the generator of requests sampled without a seed of their own.
        ``batched_decode=False`` runs every one-token chunk on its own (chunked, per-sequence)
        path: the reference the batched decode step is tested against. ``matmul`` picks the CPU
        GEMM library per shape class (`radixflow.runners.matmul.parse_plan`): ``"auto"``
        measures at startup; a bad value raises `ProblemError` on ``matmul``.
        ``predict_rounds``: learn a round predictor (`runners.round_predictor`) from the rounds
        run, starting from the profile stored for this model and machine; off, the runner
        predicts nothing (calibration times the bare worker call). ``clock``: what a round
        advances the engine by (`radixflow.engine.clocks`; the wall time is measured beside).
        ``kernels``: what runs the decode steps that are not GEMMs (`models.kernels.backend`:
        auto, native or torch); one that cannot run here raises `ProblemError` on ``kernels``, as a
        ``device`` this machine lacks (or torch does not know) does on ``device``."""
        problem = settings_problem(matmul, kernels, device, dtype)
        if problem is not None:
            raise ProblemError(problem)
        given = parse_plan(matmul)
        assert not isinstance(given, Problem)  # refused above
        self.kernels = _kernels(kernels, device, dtype)  # before the model: a refusal costs nothing
        self.threads = torch.get_num_threads()  # what it computes on (`thread_count`), the process's now
        self.net = load_model(path, device=device, dtype=dtype)
        use_kernels(self.net, self.kernels)  # the norms; the decode steps take them from each batch
        self.batched_decode = batched_decode
        self.clock = round_clock(clock)
        self.device, self.dtype, self.block_size = device, dtype, block_size
        self.matmul = self._route_matmuls(given, path if predict_rounds else None)
        self.kv, self.state = self._pools(num_blocks, num_slots)
        eos = eos_token_ids(path, self.net.config)
        self.sampler = Sampler(seed, eos)
        self.scorer = PromptScorer(self.net, self.kv)
        self.model = self._model_info(label or Path(path).name, eos)
        self._warmup()
        self.predictor = self._predictor(path, label) if predict_rounds else None

    def _pools(self, num_blocks: int, num_slots: int) -> tuple[KVPool, StatePool]:
        """The KV blocks and recurrent-state slots of the loaded model."""
        hidden = int(self.net.config.hidden_size)
        try:
            kv = KVPool(
                self.net.kv_layout(), num_blocks, self.block_size, self.dtype, self.device, hidden_size=hidden
            )
            # recurrent state stays float32 whatever the weights' dtype: it is small, and it carries
            # every earlier token (a bfloat16 state would round the whole history each step)
            return kv, StatePool(self.net.state_layout(), num_slots, torch.float32, self.device)
        except torch.OutOfMemoryError as e:
            # a GPU's (a RuntimeError): its memory is not weighed up front as a CPU's is, so this
            # is where the engine's build learns the pools are too large ("lower kv_blocks")
            raise MemoryError(str(e)) from None

    def _model_info(self, name: str, eos: tuple[int, ...]) -> ModelInfo:
        """What the engine knows of the loaded model, its pools made."""
        cfg = self.net.config
        return ModelInfo(
            name=name,
            has_recurrent=bool(self.net.state_layout()),
            same_round_state=True,  # recurrent layers run a round's rows in waves (`ForwardBatch.waves`)
            vocab_size=int(cfg.vocab_size),
            max_context=int(cfg.get("max_position_embeddings") or DEFAULT_CONTEXT),
            eos_token_ids=eos,
            kv_bytes_per_token=_row_bytes([*self.kv.k.values(), *self.kv.v.values(), self.kv.hidden]),
            checkpoint_bytes=_row_bytes([t for ts in self.state.tensors.values() for t in ts]),
        )

    def resolved(self) -> dict[str, object]:
        """What runs here, ``auto`` resolved: the decode-step ``kernels``, the ``matmul`` plan
        (None where no plan routes the matmuls: not CPU float32, torch's own GEMM runs) and the
        prior the ``round_predictor`` started from (None where it predicts nothing)."""
        plan = None if self.matmul is None else self.matmul.plan.describe()
        prior = None if self.predictor is None else self.predictor.source
        return {"kernels": self.kernels.name, "matmul": plan, "round_predictor": prior}

    def settings(self) -> RunnerSettings:
        """The kernels and matmul routes its rounds run on, as resolved: what its stored profile is
        keyed by beside the model and machine (a profile timed on others prices rounds otherwise)."""
        return RunnerSettings(self.kernels.name, None if self.matmul is None else self.matmul.plan.routes())

    @property
    def round_predictor(self) -> LearnedRoundPredictor | None:
        return self.predictor

    def _predictor(self, path: str | Path, label: str | None) -> LearnedRoundPredictor:
        """The stored profile of this model on this machine, timed on these kernels and matmul
        routes, as the prior, else the nominal one."""
        threads = self.threads
        key = store_key(path, self._dtype_name(), self.device, threads, self.settings())
        return make_predictor(path, label or Path(path).name, load_stored(key), threads)

    def _route_matmuls(self, given: MatmulPlan | None, stored_for: str | Path | None) -> MatmulRouter | None:
        """Route the model's Linear layers (CPU float32 only; None elsewhere): the given plan; on
        "auto", the routes of the newest profile stored for the model at ``stored_for`` (a
        predicting runner: a plan measured now may differ from the one its prior was timed on,
        which is then not found); else one measured now, once, on the model's dominant weight
        shape (calibrate's runner measures: a new calibration may time a better plan)."""
        weight = dominant_weight(self.net)
        if not routes_matmuls(self.device, self.dtype) or weight is None:
            return None
        if given is None and stored_for is not None:
            dtype, kernels = self._dtype_name(), self.kernels.name
            given = calibrated_plan(stored_routes(stored_for, dtype, self.device, self.threads, kernels))
        return install(self.net, given if given is not None else measure_plan(weight))

    def _dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def _round(self, fb: ForwardBatch) -> contextlib.AbstractContextManager[None]:
        """Tell the matmul router whether this forward is a decode-only round."""
        if self.matmul is None:
            return contextlib.nullcontext()
        return self.matmul.round(all(s.length == 1 for s in fb.seqs))

    def _warmup(self) -> None:
        """Throwaway forwards (a prefill round with a decode row, then a decode-only round), so
        lazy kernel setup is not billed to the first rounds."""
        kv = KVPool(self.net.kv_layout(), 8, 16, self.dtype, self.device)
        state = StatePool(self.net.state_layout(), 0, torch.float32, self.device)
        for specs in (
            [SeqSpec(0, 16, [0]), SeqSpec(0, 16, [1]), SeqSpec(0, 1, [2])],
            [SeqSpec(0, 1, [i]) for i in range(8)],
        ):
            chunks = [([1] * s.length, s) for s in specs]
            fb = ForwardBatch.build(chunks, kv, state, self.device, self.batched_decode, self.kernels)
            with self._round(fb):
                self._forward(fb, [True] * len(specs))

    def validate(self, request: Request) -> Problem | None:
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        with thread_count(self.threads):
            return self._run(batch)

    def _run(self, batch: SchedulerOutput) -> RoundResult:
        if not batch.chunks:  # nothing to compute, as the sim answers it: no forward over zero rows
            return RoundResult(samples={}, duration_s=0.0, worker_call_s=0.0)
        chunks = [(list(c.tokens[c.start : c.end]), _spec(c)) for c in batch.chunks]
        sampled = [c for c in batch.chunks if c.sample]
        # the round's terms and its prediction, outside the timed call
        features = None if self.predictor is None else self.predictor.features(batch.chunks)
        predicted = None if features is None else self.predictor.fit.predict(features)  # type: ignore[union-attr]
        learned = 0 if self.predictor is None else self.predictor.fit.rounds
        t0, c0 = time.perf_counter(), self.clock.read()
        fb = ForwardBatch.build(chunks, self.kv, self.state, self.device, self.batched_decode, self.kernels)
        self.scorer.forget(fb.new_slots.tolist())  # before the forward: a failed round may write KV
        with torch.inference_mode(), self._round(fb):
            hidden = self.net(fb)
            self.scorer.record(fb.new_slots, hidden)
            logits = self._logits(fb, hidden, [c.sample for c in batch.chunks])
        rows = [SampleRow(c.sampling, c.end, c.tokens, c.prompt_len) for c in sampled]
        samples = self.sampler.sample(logits, rows)
        prompt_logprobs = self.scorer.score(batch.chunks)
        elapsed, wall = self.clock.read() - c0, time.perf_counter() - t0
        if features is not None:  # the predictor learns the engine's clock: the scheduler weighs rounds in it
            self.predictor.observe(features, elapsed)  # type: ignore[union-attr]
        return RoundResult(
            samples={c.request_id: s for c, s in zip(sampled, samples, strict=True)},
            duration_s=elapsed,
            worker_call_s=elapsed,
            prompt_logprobs=prompt_logprobs,
            predicted_s=predicted,
            predicted_from=learned,
            wall_s=None if self.clock.name == "wall" else wall,
        )

    def _forward(self, fb: ForwardBatch, sample: list[bool]) -> torch.Tensor:
        with torch.inference_mode():
            return self._logits(fb, self.net(fb), sample)

    def _logits(self, fb: ForwardBatch, hidden: torch.Tensor, sample: list[bool]) -> torch.Tensor:
        """float32 logits of the last position of every chunk marked in ``sample``."""
        last = fb.last_token_indices()[torch.tensor(sample, dtype=torch.bool, device=hidden.device)]
        return self.net.compute_logits(hidden[last]).float()

    def reference_tokens(self, requests: list[Request]) -> dict[str, int]:
        """Greedy token of each request from a plain full prefill with no cache at all."""
        return {
            req.id: int(self.reference_logits(req.prompt).argmax(-1))
            for req in requests
            if validate_prompt(req, self.model) is None
        }

    def reference_logits(self, tokens: tuple[int, ...]) -> torch.Tensor:
        """The next token's logits ``[vocab]`` after ``tokens``, from a plain full prefill with no
        cache at all (the reference the cached paths are tested against)."""
        nblocks = -(-len(tokens) // self.block_size)
        kv = KVPool(self.net.kv_layout(), nblocks, self.block_size, self.dtype, self.device)
        state = StatePool(self.net.state_layout(), 0, torch.float32, self.device)
        spec = SeqSpec(0, len(tokens), list(range(nblocks)))
        fb = ForwardBatch.build([(list(tokens), spec)], kv, state, self.device)
        with thread_count(self.threads):
            return self._forward(fb, [True])[0]


def native_problem(device: str, dtype: torch.dtype) -> Problem | None:
    """Why the native kernels cannot run here on ``device`` in ``dtype`` (None: they can): the
    runner's own refusal, the library built (or found) as the runner builds it."""
    try:
        _kernels("native", device, dtype)
    except ProblemError as e:
        return e.problem
    return None


def _kernels(name: str, device: str, dtype: torch.dtype) -> Kernels:
    """The decode-step backend for option ``kernels``, its native library cached beside the zoo's
    models (`models.zoo.default_cache_dir`)."""
    from radixflow.models.zoo import default_cache_dir

    try:
        return resolve_kernels(name, device, dtype, default_cache_dir() / "kernels")
    except KernelsError as e:
        raise ProblemError(Problem("kernels", str(e))) from None


def _row_bytes(tensors: list[torch.Tensor | None]) -> int:
    """Bytes of one row (one token's slot, one checkpoint's slot) across pool tensors."""
    return sum(math.prod(t.shape[1:]) * t.element_size() for t in tensors if t is not None)
