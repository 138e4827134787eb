"""Decode throughput and candidate scoring of the torch runner vs transformers, same weights.

Decode: N concurrent requests with equal-length prompts, each generating G greedy tokens through
the engine (one packed forward per round), against transformers' ``generate`` on the same N
prompts as one batch (equal lengths: no padding) and one prompt at a time. Tokens/s counts
generated tokens over the wall time of the whole run, prefill included.

Scoring: K candidates after one shared context, each asking for prompt logprobs (``echo``) and
no generated token. Ours with the cache (the context's hidden states are reused, its output-head
rows memoized) against ours with every candidate in a fresh engine (no reuse: what vLLM does for
prompt logprobs) and transformers' forward per candidate. Reports candidates/s and the largest
logprob difference between the cached and the cold runs.

Repeats are interleaved and medians reported, since the machine is shared and noisy.

    python benchmarks/generation_throughput.py --json results/generation_throughput.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from radixflow.engine.engine import Engine
from radixflow.models.zoo import ensure_model
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams


def tokens(vocab: int, n: int, g: torch.Generator) -> tuple[int, ...]:
    return tuple(torch.randint(3, vocab, (n,), generator=g).tolist())


def config(requests: int, longest: int) -> SchedulerConfig:
    blocks = requests * (-(-longest // 16) + 1) + 16
    return SchedulerConfig(
        token_budget=4096, max_requests=max(requests, 1), num_blocks=blocks, num_state_slots=256
    )


def engine_run(runner: TorchRunner, cfg: SchedulerConfig, reqs: list[Request]) -> list[Request]:
    engine = Engine(runner, cfg)
    engine.run(reqs)
    return reqs


def median_time(fn: Callable[[], object], times: list[float]) -> object:
    t0 = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t0)
    return out


def bench_decode(
    runner: TorchRunner, hf, n: int, prompt_len: int, gen: int, repeats: int
) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    prompts = [tokens(runner.model.vocab_size, prompt_len, g) for _ in range(n)]
    cfg = config(n, prompt_len + gen)
    params = SamplingParams(max_tokens=gen, ignore_eos=True)

    def ours() -> list[list[int]]:
        reqs = [Request(f"r{i}", p, sampling=params) for i, p in enumerate(prompts)]
        return [r.output for r in engine_run(runner, cfg, reqs)]

    def theirs(batch: list[tuple[int, ...]]) -> list[list[int]]:
        with torch.inference_mode():
            out = hf.generate(
                torch.tensor(batch), max_new_tokens=gen, do_sample=False, eos_token_id=None, pad_token_id=0
            )
        return out[:, prompt_len:].tolist()

    t_ours: list[float] = []
    t_hf: list[float] = []
    t_seq: list[float] = []
    for _ in range(repeats):
        a = median_time(ours, t_ours)
        b = median_time(lambda: theirs(prompts), t_hf)
        median_time(lambda: [theirs([p])[0] for p in prompts], t_seq)
    total = n * gen
    return {
        "requests": n,
        "prompt_len": prompt_len,
        "generated_per_request": gen,
        "ours_tokens_per_s": total / statistics.median(t_ours),
        "transformers_batched_tokens_per_s": total / statistics.median(t_hf),
        "transformers_sequential_tokens_per_s": total / statistics.median(t_seq),
        "tokens_equal_batched_transformers": a == b,
    }


def bench_scoring(
    runner: TorchRunner, hf, k: int, context_len: int, cand_len: int, repeats: int
) -> dict[str, object]:
    g = torch.Generator().manual_seed(1)
    vocab = runner.model.vocab_size
    context = tokens(vocab, context_len, g)
    prompts = [context + tokens(vocab, cand_len, g) for _ in range(k)]
    cfg = config(k, context_len + cand_len)
    echo = SamplingParams(max_tokens=0, prompt_logprobs=1)

    def cached() -> list[Request]:
        return engine_run(runner, cfg, [Request(f"c{i}", p, sampling=echo) for i, p in enumerate(prompts)])

    def cold() -> list[Request]:
        return [
            engine_run(runner, cfg, [Request(f"c{i}", p, sampling=echo)])[0] for i, p in enumerate(prompts)
        ]

    def theirs() -> list[torch.Tensor]:
        with torch.inference_mode():
            return [torch.log_softmax(hf(torch.tensor([p])).logits[0].float(), -1) for p in prompts]

    t_cached: list[float] = []
    t_cold: list[float] = []
    t_hf: list[float] = []
    for _ in range(repeats):
        rows_before = runner.scorer.rows_computed
        a = median_time(cached, t_cached)
        rows_cached = runner.scorer.rows_computed - rows_before
        b = median_time(cold, t_cold)
        median_time(theirs, t_hf)
    diff = max(
        abs(x.logprob - y.logprob)
        for ra, rb in zip(a, b, strict=True)
        for x, y in zip(ra.prompt_logprobs, rb.prompt_logprobs, strict=True)
    )
    return {
        "candidates": k,
        "context_len": context_len,
        "candidate_len": cand_len,
        "reused_tokens_per_candidate": statistics.median(r.reused for r in a),
        "output_head_rows_cached": rows_cached,
        "ours_cached_candidates_per_s": k / statistics.median(t_cached),
        "ours_no_reuse_candidates_per_s": k / statistics.median(t_cold),
        "transformers_candidates_per_s": k / statistics.median(t_hf),
        "max_abs_logprob_diff_cached_vs_cold": diff,
    }


def report(name: str, d: dict[str, object], s: dict[str, object]) -> None:
    print(
        f"{name}: decode {d['requests']} requests x {d['generated_per_request']} tokens: "
        f"ours {d['ours_tokens_per_s']:.1f} tok/s, transformers batched "
        f"{d['transformers_batched_tokens_per_s']:.1f}, "
        f"one by one {d['transformers_sequential_tokens_per_s']:.1f}; "
        f"tokens equal to batched transformers: {d['tokens_equal_batched_transformers']}",
        flush=True,
    )
    print(
        f"{name}: echo-score {s['candidates']} candidates after a {s['context_len']}-token context: "
        f"ours cached {s['ours_cached_candidates_per_s']:.2f}/s, ours without reuse "
        f"{s['ours_no_reuse_candidates_per_s']:.2f}/s, "
        f"transformers {s['transformers_candidates_per_s']:.2f}/s; "
        f"output-head rows {s['output_head_rows_cached']}; max |Δ logprob| cached vs cold "
        f"{s['max_abs_logprob_diff_cached_vs_cold']:.1e}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3_5-small", "smollm2-135m"])
    ap.add_argument("--requests", type=int, default=8, help="concurrent decoding requests")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--generate", type=int, default=32, help="tokens generated per request")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--context-len", type=int, default=512)
    ap.add_argument("--candidate-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=Path("results/generation_throughput.json"))
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    rows = []
    for name in args.models:
        path = ensure_model(name)
        longest = max(args.prompt_len + args.generate, args.context_len + args.candidate_len)
        cfg = config(max(args.requests, args.candidates), longest)
        runner = TorchRunner(path, cfg.block_size, cfg.num_blocks, cfg.num_state_slots, label=name)
        hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        decode = bench_decode(runner, hf, args.requests, args.prompt_len, args.generate, args.repeats)
        scoring = bench_scoring(
            runner, hf, args.candidates, args.context_len, args.candidate_len, args.repeats
        )
        rows.append({"model": name, "decode": decode, "scoring": scoring})
        report(name, decode, scoring)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": rows}, indent=2)
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
