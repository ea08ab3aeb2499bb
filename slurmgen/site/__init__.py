"""What the cluster and the site say: sinfo and scontrol, the Slurm release, check, fit, the user's script."""
