"""`radixflow` command line: one module per command, assembled in `app`."""

from radixflow.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
