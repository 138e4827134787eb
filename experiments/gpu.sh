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

# 1. the GPU profile, fitted to measured rounds (wall clock: the CPU clock does not see GPU work)
radixflow calibrate "${model_flags[@]}" --device cuda --clock wall --torch-threads "$(nproc)" --repeats 5 \
    --max-tokens 4096 --out "$profile" | tee "$out/calibrate.txt"

# 2. the paper experiment: torch cells on the GPU, checked against the GPU profile
sed -e "s|^cost_profile = .*|cost_profile = \"$profile\"|" experiments/paper.toml > "$out/paper.toml"
radixflow experiment "$out/paper.toml" --device cuda --out "$out/paper"

# 3. the sim cells on the measured GPU profile instead of the datasheet ones
sed -e "s|^hardware = .*|hardware = \"$profile\"|" -e 's|^name = "paper"|name = "paper_measured_gpu"|' \
    "$out/paper.toml" > "$out/paper_measured_gpu.toml"
radixflow experiment "$out/paper_measured_gpu.toml" --device cuda --out "$out/paper_measured_gpu"
echo "wrote $out/calibrate.txt, $out/paper/report.md, $out/paper_measured_gpu/report.md"
