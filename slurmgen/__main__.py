"""The `slurmgen` command's process (its console script, and `python -m slurmgen`): marked as the
command before the command group is imported, so that the imports of click and jinja2 are frozen
(slurmgen.uncollected) rather than walked, all of them, by the collection that re-enabling the
collector brings on: ~2 ms of every command. A library that imports slurmgen.cli keeps its collections."""


def main():
    from slurmgen.uncollected import as_command

    as_command()
    from slurmgen import cli

    cli.main()


if __name__ == "__main__":
    main()
