from slurmgen.submit.command import main

main()
