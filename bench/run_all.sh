#!/bin/bash
# `make bench`: every figure in the README's benchmark table, in one go. The cluster benches need
# the local cluster (tests/localcluster.sh up) or a configured Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
# Times the local cluster's own start-up, so it runs only while that cluster is down.
if tests/localcluster.sh status >/dev/null 2>&1; then
    echo "== bench/cluster_and_demo.py: not run, the local cluster is up (it times start-up)"
else
    echo "== bench/cluster_and_demo.py"
    python bench/cluster_and_demo.py
fi
for bench in render_speed bench_packing bench_dataprep bench_memory bench_load_once rank_hooks_overhead submit_latency script_overhead resume_exactness; do
    echo "== bench/$bench.py"
    python "bench/$bench.py"
done
