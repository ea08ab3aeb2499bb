"""The sbatch script: the Jinja environment, quoting, and the text of a plan."""
