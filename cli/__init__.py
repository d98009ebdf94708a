"""The ``decode-tui`` command line. It imports typer, never torch at start-up."""
