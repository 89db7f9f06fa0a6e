#!/usr/bin/env bash
# The GPU checks of issue 15, for a session that has a CUDA machine: run once, from the repository root.
#
#   bash benchmarks/gpu_check.sh            # figures land in ${OUT:-runs/gpu-check}
#
# 1. the cuda-marked tests (CUDA training matches the CPU, bfloat16 and float16
#    training lower the loss, KV cache equals uncached, same seed same text);
# 2. a short real run on the GPU through the CLI, bfloat16, and a sample from it;
# 3. two processes with NCCL when there are two GPUs (weights vs one process);
# 4. training tokens/s against the nanoGPT-style reference at gpt-char's shape,
#    float32 and bfloat16. Paste the JSON figures into docs/benchmarks.md.
# Budget: about 5 minutes on one H200-class GPU.
set -u -o pipefail
OUT="${OUT:-runs/gpu-check}"
mkdir -p "$OUT"
PY="${PYTHON:-.venv/bin/python}"
ZOO="${ZOO:-.venv/bin/zoo}"
[ -x "$PY" ] || PY=python
command -v "$ZOO" >/dev/null 2>&1 || [ -x "$ZOO" ] || ZOO=zoo
status=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

log "$(date -u) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" | tee -a "$OUT/summary.txt"

log "1. cuda-marked tests"
timeout 300 "$PY" -m pytest tests/test_devices.py -m "cuda" -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -5 || status=1

log "2. train 200 steps of gpt-char-mini on cuda in bfloat16, then sample"
timeout 300 "$ZOO" train gpt-char-mini --steps 200 --device cuda --dtype bfloat16 --out "$OUT/run" --quiet 2>&1 | tee -a "$OUT/summary.txt" || status=1
ZOO_REGISTRY="$OUT/run/registry.toml" timeout 120 "$ZOO" sample gpt-char-mini --device cuda --dtype bfloat16 --prompt "ROMEO:" --max-new-tokens 80 2>&1 | tee -a "$OUT/summary.txt" || status=1

GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -ge 2 ]; then
  log "3. two processes with NCCL vs one"
  timeout 300 "$ZOO" train transformer-1b-learned-ctx8 --steps 20 --device cuda --nproc-per-node 2 --out "$OUT/A" --quiet 2>&1 | tee -a "$OUT/summary.txt" || status=1
  timeout 300 "$ZOO" train transformer-1b-learned-ctx8 --steps 20 --device cuda --out "$OUT/B" --quiet 2>&1 | tee -a "$OUT/summary.txt" || status=1
  "$PY" - "$OUT" <<'PYEOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys
from safetensors.torch import load_file
out = sys.argv[1]
a = load_file(f"{out}/A/transformer-1b-learned-ctx8.safetensors"); b = load_file(f"{out}/B/transformer-1b-learned-ctx8.safetensors")
print("max abs difference, 2 GPUs vs 1:", max(float((a[k] - b[k]).abs().max()) for k in a))
PYEOF
else
  log "3. skipped: one GPU (NCCL data-parallel needs two)"
fi

log "4. training tokens/s vs the reference at gpt-char's shape"
for dtype in float32 bfloat16; do
  timeout 300 "$PY" -m benchmarks.bench_gpu_training --dtype "$dtype" --json "$OUT/bench-$dtype.json" 2>&1 | tee -a "$OUT/summary.txt" || status=1
done
log "done (status $status); figures in $OUT"
exit $status
