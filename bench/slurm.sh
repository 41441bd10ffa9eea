#!/usr/bin/env bash
# What going through the scheduler costs, side by side in one hyperfine run (the machine is
# shared and noisy: compare the ratios, not the absolute times):
#
#  1. plain `srun true`: the floor, the scheduler's own cost for a one-task step;
#  2. `nestbox exec --backend slurm --no-cage -- true`: the job script (job directory, env
#     file, supervisor, status file) and this side's polling of the job's files;
#  3. `nestbox exec --backend slurm -- true`: the same, caged on the node by `nestbox run`;
#  4. `sbatch` of `true` until the job has left the queue (a background job's path),
#     for scale.
#
#   bench/slurm.sh              # starts the test cluster (scripts/services/slurm-up.sh) if needed
#   RUNS=50 bench/slurm.sh
# Needs: hyperfine; a nestbox binary (NESTBOX=path to override). Writes bench/results/slurm.md
# and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}
OUT=bench/results
mkdir -p "$OUT"
need_packages hyperfine

NESTBOX=${NESTBOX:-$(release_nestbox)}
eval "$(scripts/services/slurm-up.sh)"
export SLURM_CONF=$NESTBOX_TEST_SLURM_CONF
jobs_dir=$NESTBOX_TEST_SLURM_JOBS/bench
mkdir -p "$jobs_dir"
nb="$NESTBOX exec --backend slurm --partition $NESTBOX_TEST_SLURM_PARTITION --jobs-dir $jobs_dir --workdir /tmp"
# The batch path: submit, then poll the queue every 20 ms until the job is gone.
batch='j=$(sbatch --parsable --export=NONE -o /dev/null --wrap true); while [ -n "$(squeue -h -j $j 2>/dev/null)" ]; do sleep 0.02; done'

echo "bench: $("$NESTBOX" --version 2>/dev/null || echo nestbox), $(sinfo --version), proctrack/$NESTBOX_TEST_SLURM_PROCTRACK, $(nproc) cores" >&2
hyperfine --warmup 3 --runs "$RUNS" -N \
  --export-markdown "$OUT/slurm.md" --export-json "$OUT/slurm.json" \
  -n 'srun true' 'srun --export=NONE /bin/true' \
  -n 'nestbox exec slurm, uncaged' "$nb --no-cage -- true" \
  -n 'nestbox exec slurm, caged on the node' "$nb --launcher $NESTBOX -- true"
hyperfine --warmup 1 --runs "$(( RUNS < 10 ? RUNS : 10 ))" \
  --export-markdown "$OUT/slurm-batch.md" \
  -n 'sbatch true, until it left the queue' "$batch"
