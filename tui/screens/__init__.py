"""Modal screens: help, prompt editor, model picker. Each has its ``.tcss`` beside it."""
