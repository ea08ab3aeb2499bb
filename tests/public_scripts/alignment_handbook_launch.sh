# source: https://github.com/huggingface/alignment-handbook/blob/925acdfe4b2b4e38c3dabd1851bc418f0b656351/recipes/launch.slurm
# launcher: accelerate
#SBATCH --job-name=handbook
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --gres=gpu:8
#SBATCH --partition=hopper-prod  # Adjust this for your cluster
#SBATCH --output=./logs/%x-%j.out
#SBATCH --error=./logs/%x-%j.err
#SBATCH --requeue
#SBATCH --time=3-00:00:00
NODELIST=($(scontrol show hostnames $SLURM_JOB_NODELIST))
MASTER_ADDR=${NODELIST[0]}  # First node for main process
MASTER_PORT=6000
export CMD=" scripts/$TASK.py --config $CONFIG_FILE $OPTIONAL_ARGS "
export LAUNCHER="ACCELERATE_LOG_LEVEL=info TRANSFORMERS_VERBOSITY=info accelerate launch --config_file recipes/accelerate_configs/$ACCELERATOR.yaml --gradient_accumulation_steps $GRAD_ACC_STEPS --num_machines $NUM_NODES --num_processes $WORLD_SIZE --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT --machine_rank $SLURM_PROCID --rdzv_backend=c10d --max_restarts 1 --tee 3 "
SRUN_ARGS=" --wait=60 --kill-on-bad-exit=1 --nodes=$NUM_NODES --ntasks=$NUM_NODES --nodelist=$NODELIST "
clear; srun $SRUN_ARGS bash -c "$LAUNCHER $CMD" 2>&1
