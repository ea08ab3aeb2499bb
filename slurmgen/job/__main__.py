import sys

from slurmgen.job.command import main

sys.exit(main(sys.argv[1:]))
