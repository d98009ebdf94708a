"""Theme data files for the TUI (``*.toml``), loaded by ``decode_tui.tui``."""
