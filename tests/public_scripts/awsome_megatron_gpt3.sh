# source: https://github.com/aws-samples/awsome-distributed-training/blob/7217859f67bc693c52ff175ccc6082c41dbd7a1b/3.test_cases/megatron/megatron-lm/slurm/gpt3/2.distributed-training.sbatch
# launcher: torchrun
#SBATCH --nodes=2 # number of nodes to use, 2 p4d(e) = 16 A100 GPUs
#SBATCH --job-name=megatron_gpt # name of your job
#SBATCH --exclusive # job has exclusive use of the resource, no sharing
#SBATCH --wait-all-nodes=1
declare -a ARGS=( --container-image $IMAGE --container-mounts $FSX_MOUNT )
declare -a TORCHRUN_ARGS=( --nproc_per_node=8 --nnodes=$SLURM_JOB_NUM_NODES --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$(hostname) )
AUTO_RESUME="--auto-resume=1"
srun ${AUTO_RESUME} -l "${ARGS[@]}" python -m torch.distributed.run "${TORCHRUN_ARGS[@]}" /workspace/Megatron-LM/pretrain_gpt.py ...
