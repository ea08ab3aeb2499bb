# source: https://github.com/aws-samples/awsome-distributed-training/blob/7217859f67bc693c52ff175ccc6082c41dbd7a1b/3.test_cases/pytorch/FSDP/slurm/llama3_1_8b-training.sbatch
# launcher: torchrun
#SBATCH --nodes=4 # number of nodes to use
#SBATCH --job-name=llama3_1_8b-FSDP # name of your job
#SBATCH --output=logs/%x_%j.out # logfile for stdout
#SBATCH --error=logs/%x_%j.err # logfile for stderr, remove it to merge both outputs
#SBATCH --exclusive # job has exclusive use of the resource, no sharing
declare -a ARGS=( --container-image $CONTAINER_IMAGE --container-mounts $FSX_MOUNT )
declare -a TORCHRUN_ARGS=( --nproc_per_node=$GPUS_PER_NODE --nnodes=$SLURM_JOB_NUM_NODES --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$(hostname) )
export TORCHRUN=torchrun
export TRAIN_SCRIPT=${TRAIN_SCRIPT:=../src/train.py}
AUTO_RESUME="--auto-resume=1"
srun ${AUTO_RESUME} -l "${ARGS[@]}" ${TORCHRUN} "${TORCHRUN_ARGS[@]}" $TRAIN_SCRIPT "${TRAINING_ARGS[@]}"
