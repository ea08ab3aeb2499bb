# source: https://github.com/huggingface/nanotron/blob/4e2d6361866bbb3dfb4ce360b27c2c50c7f34fda/examples/slurm/train-2.slurm
# launcher: torchrun
#SBATCH --job-name=aaa
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # crucial - only 1 task per dist per node!
#SBATCH --cpus-per-task=60
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --account=ycm@a100
#SBATCH --constraint=a100
#SBATCH --reservation=bloom2
#SBATCH --output=logs/%x_%j.out
MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
MASTER_PORT=6000
CMD=" run_train.py --config-file $CONFIG_FILE "
export LAUNCHER="torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT --rdzv_backend c10d --max_restarts 0 --tee 3 "
srun $SRUN_ARGS -u bash -c "$LAUNCHER --node_rank \$SLURM_PROCID --role \$SLURMD_NODENAME: $CMD"
