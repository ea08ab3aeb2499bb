#!/bin/bash
# `make bench`: every figure in the README's benchmark table, in one go. The cluster benches need
# the local cluster (tests/localcluster.sh up) or a configured Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
for bench in render_speed bench_packing bench_dataprep bench_memory submit_latency script_overhead; do
    echo "== bench/$bench.py"
    python "bench/$bench.py"
done
