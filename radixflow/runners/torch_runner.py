"""Real runner: one packed PyTorch forward per round over the chunks the scheduler chose."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.models.batch import ForwardBatch, KVPool, SeqSpec, Snapshot, StatePool
from radixflow.models.io.loader import load_model
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.sampling import Sample

TOP_LOGPROBS = 5


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
    ) -> None:
        self.net = load_model(path, device=device, dtype=dtype)
        self.device, self.dtype, self.block_size = device, dtype, block_size
        cfg = self.net.config
        self.kv = KVPool(self.net.kv_layout(), num_blocks, block_size, dtype, device)
        self.state = StatePool(self.net.state_layout(), num_slots, dtype, device)
        self.model = ModelInfo(
            name=label or Path(path).name,
            has_recurrent=bool(self.net.state_layout()),
            vocab_size=int(cfg.vocab_size),
            max_context=int(cfg.get("max_position_embeddings", 4096)),
        )
        self._warmup()

    def _warmup(self) -> None:
        """One throwaway packed forward, so lazy kernel setup is not billed to the first round."""
        specs = [SeqSpec(0, 16, [0]), SeqSpec(0, 16, [1])]
        kv = KVPool(self.net.kv_layout(), 2, 16, self.dtype, self.device)
        state = StatePool(self.net.state_layout(), 0, self.dtype, self.device)
        fb = ForwardBatch.build([([1] * 16, s) for s in specs], kv, state, self.device)
        self._forward(fb, [True, True])

    def validate(self, request: Request) -> str | None:
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        chunks = [(list(c.tokens[c.start : c.end]), _spec(c)) for c in batch.chunks]
        sampled = [c.request_id for c in batch.chunks if c.sample]
        t0 = time.perf_counter()
        fb = ForwardBatch.build(chunks, self.kv, self.state, self.device)
        logits = self._forward(fb, [c.sample for c in batch.chunks])
        samples = self._pick(sampled, logits)
        elapsed = time.perf_counter() - t0
        return RoundResult(samples=samples, duration_s=elapsed, worker_call_s=elapsed)

    def _forward(self, fb: ForwardBatch, sample: list[bool]) -> torch.Tensor:
        with torch.inference_mode():
            hidden = self.net(fb)
            last = fb.last_token_indices()[torch.tensor(sample, dtype=torch.bool, device=hidden.device)]
            return self.net.compute_logits(hidden[last]).float()

    @staticmethod
    def _pick(ids: list[str], logits: torch.Tensor) -> dict[str, Sample]:
        """Greedy token of each sampled chunk, with its logprob and the top alternatives."""
        if not ids:
            return {}
        logprobs = torch.log_softmax(logits, dim=-1)
        values, indices = logprobs.topk(min(TOP_LOGPROBS, logprobs.shape[-1]), dim=-1)
        return {
            rid: Sample(
                int(indices[i, 0]),
                float(values[i, 0]),
                tuple((int(t), float(v)) for t, v in zip(indices[i], values[i], strict=True)),
            )
            for i, rid in enumerate(ids)
        }

    def reference_tokens(self, requests: list[Request]) -> dict[str, int]:
        """Greedy token of each request from a plain full prefill with no cache at all."""
        out: dict[str, int] = {}
        for req in requests:
            if validate_prompt(req, self.model) is not None:
                continue
            nblocks = -(-len(req.prompt) // self.block_size)
            kv = KVPool(self.net.kv_layout(), nblocks, self.block_size, self.dtype, self.device)
            state = StatePool(self.net.state_layout(), 0, self.dtype, self.device)
            spec = SeqSpec(0, len(req.prompt), list(range(nblocks)))
            fb = ForwardBatch.build([(list(req.prompt), spec)], kv, state, self.device)
            out[req.id] = int(self._forward(fb, [True]).argmax(-1)[0])
        return out
