#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: calibrate the cost model on the GPU from timed worker calls of
# the -small zoo models, then run the paper experiment with its torch cells on CUDA (their worker
# time predicted by the measured GPU profile), and its sim cells once more on that profile.
# Never needed by the tests.  Usage: experiments/gpu.sh [OUT_DIR]   (default: results/gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-results/gpu}"
mkdir -p "$out"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
models=(qwen3_5-small qwen3_next-small lfm2-small nemotron_h-small falcon_h1-small qwen3-small)
model_flags=()
for m in "${models[@]}"; do model_flags+=(--model "$m"); done
profile="$(realpath -m "$out/profile-cuda.json")"

# 1. the GPU profile, fitted to measured rounds (wall clock: the CPU clock does not see GPU work),
#    on the one torch thread paper.toml's torch cells run on: each model's own fit is stored for
#    that thread count, and only a runner on as many threads starts its round predictor from it
radixflow calibrate "${model_flags[@]}" --device cuda --clock wall --torch-threads 1 --repeats 5 \
    --max-tokens 4096 --out "$profile" | tee "$out/calibrate.txt"

# 1b. what the fit measured: the fixed cost of a worker call and each term's rate on this GPU, beside
#     what the shipped H100/H200 profiles assume (3 ms per call with prefill, measured kernel tables)
python - "$profile" <<'PY' | tee "$out/fixed_cost.txt"
import json, sys
p = json.load(open(sys.argv[1]))
# the fit splits a call's fixed cost between the call and its decoder layers (launches per layer)
layer = p.get("layer_overhead_s") or 0.0
print(f"measured fixed cost per worker call: {p['round_overhead_s'] * 1e3:.3f} ms "
      f"+ {layer * 1e3:.3f} ms per decoder layer (+ {p['per_request_s'] * 1e3:.3f} ms per sequence)")
for term, scale in sorted(p.get("kind_scale", {}).items()):
    print(f"{term}: {p['flops'] / scale / 1e12 if scale else float('inf'):.1f} TFLOP/s effective")
PY

# 2. the paper experiment: torch cells on the GPU, checked against the GPU profile
sed -e "s|^cost_profile = .*|cost_profile = \"$profile\"|" experiments/paper.toml > "$out/paper.toml"
radixflow experiment "$out/paper.toml" --device cuda --out "$out/paper"

# 3. the sim cells on the measured GPU profile instead of the datasheet ones
sed -e "s|^hardware = .*|hardware = \"$profile\"|" -e 's|^name = "paper"|name = "paper_measured_gpu"|' \
    "$out/paper.toml" > "$out/paper_measured_gpu.toml"
radixflow experiment "$out/paper_measured_gpu.toml" --device cuda --out "$out/paper_measured_gpu"
echo "wrote $out/calibrate.txt, $out/fixed_cost.txt, $out/paper/report.md, $out/paper_measured_gpu/report.md"
