"""The torch runner on a GPU: prefill and decode speed in bfloat16 (or float16), side by side with
transformers on the same device, with the exactness checks beside each row.

Prepared for a machine with a CUDA device; on one without, it says so and exits with status 2
before loading anything. ``--device cpu --dtype float32`` runs the same script on a CPU (a dry run
of the script itself, not a measurement of interest).

For each model: a prefill of ``--prefill`` prompts from scratch (ours: one packed forward;
transformers: one prompt at a time), then decode at each ``--requests`` count (ours: the engine;
transformers: batched ``generate``), each timed with the device synchronised, medians of
interleaved repeats (each side first in turn), the ratio of the medians and repeat by repeat
(``ratio_runs``, ``ratio_paired``: [min, median, max]; min-max printed), beside the host's
1-minute load average before and after. Beside each
row: whether the greedy tokens equal transformers' and the largest logit / logprob difference.
In bfloat16 both sides round differently (another summation order, another kernel), so
differences of ~1e-1 and a few diverging tokens deep into a decode are expected there; the
float32 run (``--dtype float32``) is the exact comparison.

    python benchmarks/gpu_runner.py --json results/gpu_runner.json
    python benchmarks/gpu_runner.py --models qwen3_5-small --dtype float32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, rotated
from radixflow.cli.args import positive_int
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.device import DeviceError, check_device, resolve_dtype
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo import ensure_model
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.options.build import new_engine
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request
from radixflow.scheduler.sampling import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, run as a script
from scheduler_overhead import machine

MODELS = ["qwen3_5-small", "lfm2-small", "nemotron_h-small"]
NO_DEVICE = 2  # exit status when the device is missing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(calls: dict[str, Callable[[], Any]], repeats: int, device: torch.device) -> dict[str, Any]:
    """Warm-up, then interleaved repeats, each call first in turn (`rotated`): median seconds and
    the last output of each call."""
    out = {name: {"out": fn(), "s": []} for name, fn in calls.items()}
    for trial in range(repeats):
        for name in rotated(list(calls), trial):
            sync(device)
            t0 = time.perf_counter()
            out[name]["out"] = calls[name]()
            sync(device)
            out[name]["s"].append(time.perf_counter() - t0)
    for r in out.values():
        r["runs"] = r["s"]  # in repeat order: repeat t of each call ran side by side
        r["s"] = statistics.median(r["s"])
    return out


def ratios(t: dict[str, Any]) -> dict[str, object]:
    """transformers' seconds over ours: of the medians (``ratio``), repeat by repeat
    (``ratio_runs``: the two ran side by side, under one load) and those's [min, median, max]
    (``ratio_paired``: what the ratio of medians is read against)."""
    pairs = zip(t["transformers"]["runs"], t["ours"]["runs"], strict=True)
    paired = [hf / ours for hf, ours in pairs if ours > 0]
    spread = [min(paired), statistics.median(paired), max(paired)] if paired else []
    return {"ratio": t["transformers"]["s"] / t["ours"]["s"], "ratio_runs": paired, "ratio_paired": spread}


def prefill(runner: TorchRunner, hf: Any, lengths: list[int], repeats: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    vocab, device = runner.model.vocab_size, torch.device(runner.device)
    batch = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]

    def ours() -> torch.Tensor:
        specs, nxt = [], 0
        for p in batch:
            blocks = -(-len(p) // 16)
            specs.append((p, SeqSpec(0, len(p), list(range(nxt, nxt + blocks)))))
            nxt += blocks
        kv = KVPool(runner.net.kv_layout(), nxt, 16, runner.dtype, device)
        state = StatePool(runner.net.state_layout(), 0, torch.float32, device)
        with torch.inference_mode():
            fb = ForwardBatch.build(specs, kv, state, str(device))
            return runner.net.compute_logits(runner.net(fb)[fb.last_token_indices()]).float()

    def theirs() -> torch.Tensor:
        with torch.inference_mode():
            rows = [hf(torch.tensor([p], device=device), logits_to_keep=1).logits[0, -1] for p in batch]
        return torch.stack(rows).float()

    t = timed({"ours": ours, "transformers": theirs}, repeats, device)
    a, b = t["ours"]["out"], t["transformers"]["out"]
    return {
        "mode": "prefill",
        "ours_tok_s": sum(lengths) / t["ours"]["s"],
        "transformers_tok_s": sum(lengths) / t["transformers"]["s"],
        **ratios(t),
        "greedy_equal": bool(torch.equal(a.argmax(-1), b.argmax(-1))),
        "max_abs_logit_diff": (a - b).abs().max().item(),
    }


def agreement(ours: list[Request], tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[bool, float]:
    """Whether every greedy token equals transformers', and the largest |Δ logprob| up to the
    first token that differs in each request."""
    equal, diff = True, 0.0
    for i, req in enumerate(ours):
        for j, s in enumerate(req.output_logprobs):
            if s.token != int(tokens[i, j]):
                equal = False
                break
            diff = max(diff, abs(s.logprob - logprobs[i, j, s.token].item()))
    return equal, diff


def decode(setup: EngineSetup, hf: Any, n: int, prompt_len: int, gen: int, repeats: int) -> dict[str, Any]:
    runner = setup.runner
    g = torch.Generator().manual_seed(n)
    device = torch.device(runner.device)
    batch = [
        tuple(torch.randint(3, runner.model.vocab_size, (prompt_len,), generator=g).tolist())
        for _ in range(n)
    ]
    # this case's share of the runner's pools (sized for the largest case)
    cfg = replace(
        setup.scheduler,
        max_requests=n,
        num_blocks=n * (-(-(prompt_len + gen) // setup.scheduler.block_size) + 1) + 16,
        num_state_slots=4 * n + 16,
    )
    params = SamplingParams(max_tokens=gen, ignore_eos=True, logprobs=0)

    def ours() -> list[Request]:
        reqs = [Request(f"r{i}", p, sampling=params) for i, p in enumerate(batch)]
        new_engine(runner, cfg, setup.options).run(reqs)
        return reqs

    def theirs() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.inference_mode():
            out = hf.generate(
                torch.tensor(batch, device=device),
                max_new_tokens=gen,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                output_scores=True,
                return_dict_in_generate=True,
            )
        return out.sequences[:, prompt_len:].cpu(), torch.log_softmax(
            torch.stack(out.scores, 1).float(), -1
        ).cpu()

    t = timed({"ours": ours, "transformers": theirs}, repeats, device)
    short = [(r.id, len(r.output), r.error) for r in t["ours"]["out"] if len(r.output) != gen]
    if short:  # a failed round ends its requests early: their rate would count tokens never made
        raise SystemExit(f"decode {n}: requests did not generate {gen} tokens: {short[:3]}")
    equal, diff = agreement(t["ours"]["out"], *t["transformers"]["out"])
    return {
        "mode": f"decode {n}",
        "ours_tok_s": n * gen / t["ours"]["s"],
        "transformers_tok_s": n * gen / t["transformers"]["s"],
        **ratios(t),
        "greedy_equal": equal,
        "max_abs_logprob_diff": diff,
    }


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda (the default), or cpu for a dry run")
    ap.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA where supported), float32, ...")
    ap.add_argument("--models", nargs="+", default=MODELS)
    # counts below 1 refused by argparse, before a model is loaded: --repeats 0 left no time to
    # take the median of, an empty prompt nothing to prefill
    ap.add_argument("--prefill", type=positive_int, nargs="+", default=[2048, 512, 1536, 1024])
    ap.add_argument("--requests", type=positive_int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--prompt-len", type=positive_int, default=128)
    ap.add_argument("--generate", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--json", type=Path, default=Path("results/gpu_runner.json"))
    ap.add_argument(
        "--smoke", action="store_true", help="CI: one tiny model, tiny shapes, on the CPU unless --device"
    )
    args = ap.parse_args()
    if args.smoke:
        args.device, args.dtype = args.device or "cpu", "float32" if args.device is None else args.dtype
        args.models, args.prefill, args.requests, args.repeats = ["qwen3_5-tiny"], [16, 8], [2], 1
        args.prompt_len, args.generate = 8, 2
    args.device = args.device or "cuda"
    return args


def measure_model(
    model: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype
) -> list[dict]:
    """Prefill and each decode case of ``model``, ours against transformers, each row printed."""
    from transformers import AutoModelForCausalLM

    path = ensure_model(model)
    longest = max(args.prompt_len + args.generate, max(args.prefill))
    block_size = EngineOptions().block_size
    blocks = max(args.requests) * (-(-longest // block_size) + 1) + 16
    options = EngineOptions(
        model=str(path),
        runner="torch",
        device=str(device),
        dtype=args.dtype,
        token_budget=8192,
        max_requests=max(args.requests),
        kv_blocks=blocks,
        state_slots=4 * max(args.requests) + 16,
    )
    setup = plan_engine(options).build()
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()
    rows = [prefill(setup.runner, hf, args.prefill, args.repeats)]
    rows += [decode(setup, hf, n, args.prompt_len, args.generate, args.repeats) for n in args.requests]
    for r in rows:
        ours, theirs = r["ours_tok_s"], r["transformers_tok_s"]
        diff = r.get("max_abs_logit_diff", r.get("max_abs_logprob_diff"))
        paired = "{:.2f}-{:.2f}".format(*r["ratio_paired"][::2]) if r["ratio_paired"] else "-"
        print(
            f"{model:<18}{r['mode']:<11} ours {ours:9.0f} tok/s  transformers {theirs:9.0f} tok/s"
            f"  {r['ratio']:5.2f}x (paired {paired})  greedy-equal {r['greedy_equal']!s:<5}"
            f"  max|Δ| {diff:.1e}",
            flush=True,
        )
    return rows


def main() -> int:
    args = arguments()
    try:
        device = check_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
    except DeviceError as e:
        print(f"gpu_runner: {e}: nothing measured", file=sys.stderr)
        return NO_DEVICE
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), dtype {dtype}", flush=True)
    load_before = load_now()
    results = []
    for model in args.models:
        results.append({"model": model, "rows": measure_model(model, args, device, dtype)})
        if device.type == "cuda":  # the model and its runner went with measure_model's frame
            torch.cuda.empty_cache()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": str(device),
        "device_name": name,
        "dtype": str(dtype),
        "machine": machine(load_before),
        "args": vars(args) | {"json": str(args.json)},
    }
    m = meta["machine"]
    before, after = m["load_1min_before"], m["load_1min_after"]
    print(f"{m['cpus']} CPUs, load average (1 min) {load_text(before)} before, {load_text(after)} after")
    write_figures(args.json, {**meta, "results": results})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
