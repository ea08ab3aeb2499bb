#!/bin/bash
# GPU check (issue 25, item 5): the GPU-only paths of train.sft on one NVIDIA GPU, offline, in
# under 5 minutes: bf16 SFT, QLoRA (skipped where bitsandbytes is missing) and FSDP under torchrun,
# on a random ~0.5 B Llama built here; one line per case with steps, seconds, tokens/s, MFU and
# peak GPU memory. How each figure is measured: bench/gpu_check.py's docstring.
#
#   bench/gpu_check.sh [--steps 30] [--batch 8] [--max-length 1024] [--warmup 5] [--workdir DIR]
#   bench/gpu_check.sh --dry-run    # or GPU_CHECK_DRY_RUN=1: CPU, a tiny model, fp32 (tests)
#
# Not part of bench/run_all.sh: it needs a GPU. Exit status 2 without one (dry run aside).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"

dry_run="${GPU_CHECK_DRY_RUN:-0}"
dry_run="${dry_run,,}"
for arg in "$@"; do
    if [[ "$arg" == "--dry-run" || "$arg" == "-h" || "$arg" == "--help" ]]; then
        dry_run=1  # no GPU needed
    fi
done

case "$dry_run" in
    1 | true | yes) ;;
    *)
        status=0
        "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' 2>/dev/null || status=$?
        if [[ "$status" -eq 3 ]]; then
            echo "bench/gpu_check.sh: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one GPU" >&2
            exit 2
        elif [[ "$status" -ne 0 ]]; then
            echo "bench/gpu_check.sh: '$PYTHON' cannot import torch (activate the project's environment, or set PYTHON)" >&2
            exit 2
        fi
        ;;
esac

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PYTHON" bench/gpu_check.py "$@"
