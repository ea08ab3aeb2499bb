# source: https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/examples/academic_paper_scripts/sc21/SRUN.sh
# launcher: srun
#SBATCH -t 0:30:00 --exclusive --mem=0 --overcommit --ntasks-per-node=8
CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"
srun -l --container-image "nvcr.io#nvidia/pytorch:20.12-py3" --container-mounts "${THIS_DIR}:${THIS_DIR},${MEGATRON_CODE_DIR}:${MEGATRON_CODE_DIR},${DOCKER_MOUNT_DIR}:${DOCKER_MOUNT_DIR}" --output=${THIS_DIR}/logs/%x_%j_$DATETIME.log sh -c "${CMD}"
