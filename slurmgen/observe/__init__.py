"""Beside and after the job: watch and report."""
