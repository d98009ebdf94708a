"""The headless decoding core of decode-tui.

Everything here runs without a terminal: model loading, the incremental
detokeniser, the sampling stages and one generator per decoding strategy,
each yielding the typed events of :mod:`decode_tui.core.record.events`.

This package deliberately knows nothing about how events are shown: it never
imports textual, rich or typer (a test checks this in a subprocess). Importing
it is cheap; torch and transformers are imported by the modules that need them.
"""
