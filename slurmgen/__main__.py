from slurmgen.cli import main

main()
