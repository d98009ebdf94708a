"""Decoding strategies: one short module each, every one a generator of events.

A strategy takes a model, a :class:`~decode_tui.core.record.transcript.Transcript`
and its parameters, and yields events until it yields ``Finished``. A caller
that stops consuming stops decoding: nothing runs ahead of the consumer.
"""
