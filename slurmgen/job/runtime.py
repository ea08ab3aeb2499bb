"""`python -m slurmgen.job.runtime`: print the path of the job runtime (runtime.sh) that generated
batch scripts source, from the slurmgen this Python imports."""

from pathlib import Path

RUNTIME = Path(__file__).with_name("runtime.sh")

if __name__ == "__main__":
    print(RUNTIME)
