#!/bin/bash
# `make demo`: the main job end to end. Builds the tiny offline assets, renders the 1,1,2,2 SFT
# job, submits it, follows it (state, step, loss) and prints the result. Uses the configured
# Slurm if there is one; otherwise starts the local four-node cluster and stops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/demo-out
cluster=tests/localcluster.sh
# took WHAT: how long WHAT took since the last phase, so a slow first run says where the time went
phase_start=$SECONDS
took() { echo "demo: $1 in $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }

started=0
if sinfo -h >/dev/null 2>&1; then
    echo "demo: using the Slurm cluster that is already configured"
else
    echo "demo: no Slurm configured; starting the local four-node cluster (GPUs 1,1,2,2)"
    "$cluster" install
    "$cluster" up >/dev/null
    started=1
    took "local cluster up"
fi
cleanup() { if (( started )); then "$cluster" down; fi; }
trap cleanup EXIT

rm -rf "$out"
mkdir -p "$out"
echo "demo: building tiny offline assets in $out/assets"
HF_HUB_DISABLE_PROGRESS_BARS=1 python -m train.tiny "$out/assets" >/dev/null
took "assets built"

slurmgen render --nodes 4 --gpus 1,1,2,2 --cpus-per-gpu 2 --job-name slurmgen-demo \
    --log-dir "$out/logs" --setup "source $repo/.venv/bin/activate" \
    --env HF_HUB_OFFLINE=1 --env HF_DATASETS_OFFLINE=1 --env TOKENIZERS_PARALLELISM=false \
    -o "$out/job.sh" -- \
    --model_name_or_path "$out/assets/lm" --dataset_name "$out/assets/data/text.jsonl" \
    --output_dir "$out/run" --max_steps 30 --save_steps 30 --per_device_train_batch_size 4 \
    --learning_rate 3e-3 --logging_steps 1 --report_to none

took "script rendered"
job=$(cd "$repo" && sbatch --parsable "$out/job.sh")
echo "demo: submitted job $job"
state=0
slurmgen watch "$job" --output-dir "$out/run" --interval 1 || state=$?
took "job $job (queue, start of 6 ranks on 4 nodes, training)"

log=$(find "$out/logs" -name "*.out" | head -n 1)
if (( state != 0 )); then
    echo "demo: the job did not complete; the last lines of its log ($log):" >&2
    tail -n 30 "$log" >&2
    exit 1
fi
python - "$out/run/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"demo: world size {m['world_size']}, ranks per host {m['ranks_per_host']}")
print(f"demo: loss {m['first_loss']:.4f} -> {m['last_loss']:.4f} over {m['global_step']} steps"
      f" ({m['samples_per_second']:.1f} samples/s)")
PY
slurmgen report "$out/run" -o "$out/report" | sed -n 's/^/demo: /; /^demo: wrote/!p'
took "report written"
echo "demo: where to look:"
echo "  model and checkpoints  $out/run"
echo "  the job's log          $log"
echo "  the script             $out/job.sh"
echo "  loss curve and report  $out/report/loss.png, $out/report/report.html"
