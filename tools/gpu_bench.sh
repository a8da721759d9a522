#!/usr/bin/env bash
# zhlm's BERT-base and BERT-large pretraining steps in bf16 on one GPU against Hugging Face
# PyTorch under CUDA autocast on the same GPU, with both sides' MFU against the GPU's dense bf16
# peak: `tools/bench.py train` on a GPU (its GPU_CASES), as one short prepared run.
#
#   bash tools/gpu_bench.sh [WHEELS_DIR]
#
# Needs jax with its CUDA plugin, torch with CUDA and transformers. WHEELS_DIR holds wheels of
# whatever else zhlm imports that the machine lacks (on a machine without PyPI: made elsewhere
# with `pip download --no-deps -d DIR ml-collections`); they are installed offline first.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/zhlm-site "$1"/*.whl
  export PYTHONPATH="/tmp/zhlm-site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 - <<'EOF'
import jax, torch, transformers
assert torch.cuda.is_available(), "torch sees no GPU"
print("jax", jax.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
EOF
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv; fi
python3 tools/bench.py train --rounds 1 --reps 10  # one GPU, nothing beside it: one round
