"""`python -m torchjob` is the `torchjob` command."""

from torchjob.cli.main import main

main()
