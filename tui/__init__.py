"""The Textual app (``decode-tui run``): views of the core's events."""
