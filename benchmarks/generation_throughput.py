"""The torch runner side by side with transformers, same weights, every mode in one run.

For each model (the three mixer kinds by default: Gated DeltaNet, LFM2 short conv, Mamba2):

- ``prefill``: prompts of mixed lengths from scratch; ours packs them into one forward with the
  runner's kernels (``--kernels``), transformers runs them one by one (no padding). Max |Δlogit|
  of the last positions.
- ``decode N``: N concurrent requests (equal-length prompts), G greedy tokens each, through the
  engine; transformers' batched ``generate`` on the same N prompts. Tokens/s counts generated
  tokens over the whole run, prefill included. Checked against transformers' forward without a
  cache over prompt + our output (every token its greedy choice; max |Δlogprob|); whether
  ``generate`` produced the same tokens is in the JSON (it differs from its own uncached forward
  on nemotron_h).
- ``score gen-1`` / ``score echo``: K candidates after one shared context, each asking for one
  greedy token (``gen-1``) or for its prompt logprobs (``echo``): ours as one batch, ours as one
  call per candidate (one engine, candidates submitted one after another, so later calls reuse
  the context), and transformers' forward per candidate. Max |Δlogprob| vs transformers.

Timing. The machine this was written on has 2 cores shared with other jobs, so wall time
swings by 2-4x from one repeat to the next. Every case therefore runs on ONE torch thread and is
timed by the CPU time of that thread (``time.thread_time``: what the computation cost, whatever
else the machine ran) as well as by the wall clock; repeats are interleaved, each case first in
turn repeat by repeat (ours then transformers, then transformers then ours...), and medians
reported, each side's spread (min-max of its CPU time, as ± of the median: the larger of ours
and transformers') printed beside the ratio, and the ratio repeat by repeat (the two ran side by
side in each: its min-max printed, every one and [min, median, max] in the JSON as
``cpu_ratio_runs_vs_transformers``, ``cpu_ratio_paired``). Ratios use the CPU-time medians; the
wall ratios and every side's [min, median, max] CPU and wall seconds are in the JSON. The load
average (1, 5, 15 min) is recorded before and after each model.

    python benchmarks/generation_throughput.py --json results/generation_throughput.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from radixflow.bench.paired_timing import HEADER, interleaved, loadavg, print_row, row
from radixflow.bench.provenance import write_figures
from radixflow.cli.args import positive_int
from radixflow.engine.engine import Engine
from radixflow.models.zoo import ensure_model
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.options.build import new_engine
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request
from radixflow.scheduler.sampling import SamplingParams

sys.path.insert(0, str(Path(__file__).parent))
from runner_throughput import hf_forward, ours_forward, prompts  # the prefill cases, shared

MODELS = ["qwen3_5-small", "lfm2-small", "nemotron_h-small"]


# the policy docs/real-models.md's figures were measured under (adaptive is the engine's default now)
POLICY = "radixflow"


def tokens(vocab: int, n: int, g: torch.Generator) -> tuple[int, ...]:
    return tuple(torch.randint(3, vocab, (n,), generator=g).tolist())


def options(model: str, requests: int, longest: int, kernels: str | None = None) -> EngineOptions:
    """The engine for ``requests`` at a time of up to ``longest`` tokens each (``kernels``: the
    decode-step backend; None: the option's default)."""
    blocks = requests * (-(-longest // EngineOptions().block_size) + 1) + 16
    given = {} if kernels is None else {"kernels": kernels}
    return EngineOptions(
        **given,
        model=model,
        runner="torch",
        dtype="float32",
        policy=POLICY,
        token_budget=4096,
        max_requests=max(requests, 1),
        kv_blocks=blocks,
        state_slots=256,
    )


def engine(setup: EngineSetup, requests: int, longest: int) -> Engine:
    """An engine over the setup's runner (its pools sized for the largest case) with this case's
    cache and round size."""
    case = options(str(setup.options.model), requests, longest)
    scheduler = replace(setup.scheduler, max_requests=case.max_requests, num_blocks=case.kv_blocks)
    return new_engine(setup.runner, scheduler, setup.options)


def bench_prefill(runner: TorchRunner, hf: Any, lengths: list[int], repeats: int) -> dict:
    batch = prompts(lengths, runner.model.vocab_size, seed=0)
    t = interleaved(
        {
            "ours": lambda: ours_forward(runner.net, batch, kernels=runner.kernels),
            "transformers": lambda: torch.cat([hf_forward(hf, [p]) for p in batch]),
        },
        repeats,
    )
    a, b = t["ours"]["out"], t["transformers"]["out"]
    equal = bool(torch.equal(a.argmax(-1), b.argmax(-1)))
    return row("prefill", sum(lengths), "tok/s", t, (a - b).abs().max().item(), equal)


def bench_decode(setup: EngineSetup, hf: Any, n: int, prompt_len: int, gen: int, repeats: int) -> dict:
    runner = setup.runner
    g = torch.Generator().manual_seed(n)
    batch = [tokens(runner.model.vocab_size, prompt_len, g) for _ in range(n)]
    params = SamplingParams(max_tokens=gen, ignore_eos=True, logprobs=0)

    def ours() -> list[Request]:
        reqs = [Request(f"r{i}", p, sampling=params) for i, p in enumerate(batch)]
        engine(setup, n, prompt_len + gen).run(reqs)
        return reqs

    def theirs() -> torch.Tensor:
        with torch.inference_mode():
            out = hf.generate(
                torch.tensor(batch), max_new_tokens=gen, do_sample=False, eos_token_id=None, pad_token_id=0
            )
        return out[:, prompt_len:]

    t = interleaved({"ours": ours, "transformers": theirs}, repeats)
    reqs, their_tokens = t["ours"]["out"], t["transformers"]["out"]
    short = [(r.id, len(r.output), r.error) for r in reqs if len(r.output) != gen]
    if short:  # a failed round ends its requests early: their rate would count tokens never made
        raise SystemExit(f"decode {n}: requests did not generate {gen} tokens: {short[:3]}")
    same_as_generate = all(r.output == their_tokens[i].tolist() for i, r in enumerate(reqs))
    equal, diff = uncached_check(hf, reqs, prompt_len)
    out = row(f"decode {n}", n * gen, "tok/s", t, diff, equal)
    out["tokens_equal_transformers_generate"] = same_as_generate
    return out


def uncached_check(hf: Any, reqs: list[Request], prompt_len: int) -> tuple[bool, float]:
    """Our generated tokens against transformers' forward WITHOUT a cache over prompt + output
    (the reference where its cached ``generate`` disagrees with its own forward, as on
    nemotron_h at small top-1 margins): every token its greedy choice there, and the largest
    |Δlogprob| of our tokens."""
    equal, diff = True, 0.0
    with torch.inference_mode():
        for req in reqs:
            ids = torch.tensor([list(req.prompt) + req.output])
            logits = hf(ids, use_cache=False).logits[0, prompt_len - 1 : -1].float()
            lp = torch.log_softmax(logits, -1)
            ours = torch.tensor(req.output)
            equal &= bool(torch.equal(lp.argmax(-1), ours))
            for j, sample in enumerate(req.output_logprobs):
                diff = max(diff, abs(sample.logprob - lp[j, sample.token].item()))
    return equal, diff


def bench_scoring(
    setup: EngineSetup, hf: Any, echo: bool, k: int, context_len: int, cand_len: int, repeats: int
) -> dict:
    g = torch.Generator().manual_seed(1)
    vocab = setup.runner.model.vocab_size
    context = tokens(vocab, context_len, g)
    cands = [context + tokens(vocab, cand_len, g) for _ in range(k)]
    params = (
        SamplingParams(max_tokens=0, prompt_logprobs=0) if echo else SamplingParams(max_tokens=1, logprobs=0)
    )

    def batch() -> list[Request]:
        reqs = [Request(f"c{i}", p, sampling=params) for i, p in enumerate(cands)]
        engine(setup, k, context_len + cand_len).run(reqs)
        return reqs

    def one_call_each() -> list[Request]:
        one = engine(setup, k, context_len + cand_len)
        reqs = [Request(f"c{i}", p, sampling=params) for i, p in enumerate(cands)]
        for req in reqs:
            one.run([req])
        return reqs

    def theirs() -> list[torch.Tensor]:
        with torch.inference_mode():
            keep = 0 if echo else 1  # gen-1 needs the last position's logits only
            return [
                torch.log_softmax(hf(torch.tensor([p]), logits_to_keep=keep).logits[0].float(), -1)
                for p in cands
            ]

    t = interleaved({"ours": batch, "ours one call each": one_call_each, "transformers": theirs}, repeats)
    diff, equal = 0.0, True
    for name in ("ours", "ours one call each"):
        for req, lp in zip(t[name]["out"], t["transformers"]["out"], strict=True):
            diff, equal = candidate_check(req, lp, echo, diff, equal)
    mode = "score echo" if echo else "score gen-1"
    return row(mode, k, "cand/s", t, diff, equal)


def candidate_check(
    req: Request, lp: torch.Tensor, echo: bool, diff: float, equal: bool
) -> tuple[float, bool]:
    """The running largest |Δlogprob| and greedy equality, carried over one candidate against
    transformers' log-probabilities ``lp``: its prompt's (``echo``), or its one token's."""
    if echo:
        for pl in req.prompt_logprobs:
            diff = max(diff, abs(pl.logprob - lp[pl.position - 1, pl.token].item()))
        return diff, equal
    sample = req.output_logprobs[0]
    equal &= sample.token == int(lp[-1].argmax())
    return max(diff, abs(sample.logprob - lp[-1, sample.token].item())), equal


def arguments() -> argparse.ArgumentParser:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument(
        "--prefill", type=positive_int, nargs="+", default=[512, 128, 384, 256], help="prompt lengths"
    )
    ap.add_argument("--requests", type=positive_int, nargs="+", default=[1, 8, 32], help="concurrent decodes")
    ap.add_argument("--prompt-len", type=positive_int, default=64)
    ap.add_argument("--generate", type=positive_int, default=32, help="tokens generated per request")
    ap.add_argument("--candidates", type=positive_int, default=16)
    ap.add_argument("--context-len", type=positive_int, default=400)
    ap.add_argument("--candidate-len", type=positive_int, default=24)
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (CPU time is per thread)")
    ap.add_argument(
        "--kernels", help="the engine's decode-step backend: auto, native or torch (default: the option's)"
    )
    ap.add_argument("--json", type=Path, default=Path("results/generation_throughput.json"))
    ap.add_argument("--smoke", action="store_true", help="one tiny model, tiny shapes, one repeat (CI)")
    return ap


def bench_model(name: str, args: argparse.Namespace, auto: Any) -> dict:
    """Every mode on one model (transformers' side loaded by ``auto``, its `AutoModelForCausalLM`),
    each row printed as it is measured; the load average around it."""
    before = loadavg()
    path = ensure_model(name)
    longest = max(args.prompt_len + args.generate, args.context_len + args.candidate_len)
    setup = plan_engine(options(name, max(*args.requests, args.candidates), longest, args.kernels)).build()
    runner = setup.runner
    hf = auto.from_pretrained(str(path), dtype=torch.float32).eval()
    rows = [bench_prefill(runner, hf, args.prefill, args.repeats)]
    print_row(name, rows[-1])
    for n in args.requests:
        rows.append(bench_decode(setup, hf, n, args.prompt_len, args.generate, args.repeats))
        print_row(name, rows[-1])
    for echo in (False, True):
        rows.append(
            bench_scoring(
                setup, hf, echo, args.candidates, args.context_len, args.candidate_len, args.repeats
            )
        )
        print_row(name, rows[-1])
    after = loadavg()
    print(f"{name}: loadavg before {before}, after {after}", flush=True)
    return {"model": name, "loadavg_before": before, "loadavg_after": after, "rows": rows}


def main() -> None:
    args = arguments().parse_args()
    if args.smoke:
        args.models, args.prefill, args.requests, args.repeats = ["qwen3_5-tiny"], [16, 8], [2], 1
        args.prompt_len, args.generate, args.candidates, args.context_len, args.candidate_len = 8, 2, 2, 16, 4
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    print(HEADER)
    results = [bench_model(name, args, AutoModelForCausalLM) for name in args.models]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_figures(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
