"""Several choices per prompt (``SamplingParams.n``) against the two ways to get them without it.

One prompt of ``--context-len`` random tokens, ``--n`` sampled continuations of ``--gen-tokens``
tokens each, through `LLM`, three ways:

* ``n``: ONE call with ``SamplingParams(n=N)``: the choices are requests sharing the prompt, so the
  cache computes it once and the choices decode side by side;
* ``calls``: N calls one after another, each with the seed its choice has (`choice_seed`): the
  prompt is computed by the first and found in the cache by the others, but every call decodes
  alone;
* ``prompts``: ONE call with N different prompts of the same length (nothing to share): what the
  choices would cost if the prompt were computed for each.

Every run draws a fresh prompt, so nothing is cached from an earlier run; each mode runs once
untimed first (a warm-up), then the modes are interleaved, their order rotated per repeat;
reported per mode: median CPU time of this process (one torch thread unless ``--torch-threads``),
the spread (min-max), the ratio to ``n`` (of the medians, and repeat by repeat: its range and
median), and the machine's load average. ``same`` checks that the N calls give exactly the N
choices of one ``n`` call.

    python benchmarks/choices.py --json results/choices.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import loads_now, loads_text, paired_lines, rotated
from radixflow.cli.args import non_negative_float, positive_int
from radixflow.generation import LLM, GenerationOutput, SamplingParams

MODES = ("n", "calls", "prompts")


VOCAB = 500  # token ids are drawn below this (every zoo model's vocabulary is larger)


def runs(
    llm: LLM, params: SamplingParams, prompt_len: int, rng: random.Random
) -> dict[str, Callable[[], object]]:
    def fresh() -> list[int]:
        return [rng.randrange(3, VOCAB) for _ in range(prompt_len)]

    return {
        "n": lambda: llm.generate([fresh()], params),
        "calls": lambda: [llm.generate([p], c)[0] for p in [fresh()] for c in params.choices()],
        "prompts": lambda: llm.generate([fresh() for _ in range(params.n)], params.choices()),
    }


def same_choices(llm: LLM, params: SamplingParams, prompt: list[int]) -> bool:
    together: list[GenerationOutput] = llm.generate([prompt], params)
    alone = [llm.generate([prompt], c)[0] for c in params.choices()]
    return [o.token_ids for o in together] == [o.token_ids for o in alone]


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--n", type=positive_int, default=8, help="choices per prompt")
    ap.add_argument("--context-len", type=positive_int, default=512)
    ap.add_argument("--gen-tokens", type=positive_int, default=16)
    ap.add_argument("--temperature", type=non_negative_float, default=0.8)
    ap.add_argument("--repeat", type=positive_int, default=3)
    ap.add_argument("--torch-threads", type=positive_int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true", help="qwen3_5-tiny, a short prompt, one repeat (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.n, args.context_len, args.gen_tokens, args.repeat = "qwen3_5-tiny", 3, 40, 3, 1
    return args


def cpu_seconds(modes: dict, repeat: int) -> dict[str, list[float]]:
    """Each mode's process CPU seconds per repeat, the modes' order rotating repeat by repeat."""
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    for rep in range(repeat):
        for mode in rotated(MODES, rep):
            t = time.process_time()
            modes[mode]()
            seconds[mode].append(time.process_time() - t)
    return seconds


def figures(seconds: dict[str, list[float]]) -> dict[str, dict]:
    """Each mode's median CPU seconds, their range, the ratio of its median to ``n``'s, its runs."""
    base = statistics.median(seconds["n"])
    return {
        m: {
            "cpu_s": statistics.median(v),
            "min_s": min(v),
            "max_s": max(v),
            "ratio_to_n": statistics.median(v) / base,
            "runs": v,
        }
        for m, v in seconds.items()
    }


def report(
    args: argparse.Namespace, rows: dict, seconds: dict[str, list[float]], loads: tuple, same: bool
) -> None:
    """The table of medians, then each mode against ``n`` repeat by repeat (their spread)."""
    load_before, load_after = loads
    print(
        f"{args.model}: one prompt of {args.context_len} tokens, n = {args.n} choices of "
        f"{args.gen_tokens} tokens; medians of {args.repeat}; "
        f"load average {loads_text(load_before)} -> {loads_text(load_after)}"
    )
    print(f"{'mode':8s} {'cpu s':>7s} {'spread':>13s} {'x n':>6s}")
    for m, r in rows.items():
        print(f"{m:8s} {r['cpu_s']:7.2f} {r['min_s']:6.2f}-{r['max_s']:<6.2f} {r['ratio_to_n']:6.2f}")
    for line in paired_lines("CPU time", seconds, "n"):  # trial t of every mode ran side by side
        print(line)
    print(f"the {args.n} calls give exactly the n = {args.n} choices: {same}")


def main() -> None:
    args = arguments()
    llm = LLM(args.model, torch_threads=args.torch_threads, seed=0)
    params = SamplingParams(
        max_tokens=args.gen_tokens, temperature=args.temperature, seed=1, ignore_eos=True, n=args.n
    )
    rng = random.Random(0)
    modes = runs(llm, params, args.context_len, rng)
    for run in modes.values():  # warm-up, every mode: first calls build kernels and plans, per shape
        run()
    load_before = loads_now()
    seconds = cpu_seconds(modes, args.repeat)
    load_after = loads_now()
    same = same_choices(llm, params, [rng.randrange(3, VOCAB) for _ in range(args.context_len)])
    rows = figures(seconds)
    report(args, rows, seconds, (load_before, load_after), same)
    if args.json:
        out = {
            "model": args.model,
            "n": args.n,
            "context_len": args.context_len,
            "gen_tokens": args.gen_tokens,
            "repeat": args.repeat,
            "load_before": load_before,
            "load_after": load_after,
            "same": same,
            "modes": rows,
        }
        write_figures(args.json, out)
    if not same:  # the figures are kept above; the run itself failed
        raise SystemExit(f"the {args.n} calls differ from the n = {args.n} choices of one call")


if __name__ == "__main__":
    main()
