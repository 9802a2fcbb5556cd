"""`python -m harness.run stage=NAME [overrides]`: the command line in harness.cli.run."""

from harness.cli.run import command

command()
