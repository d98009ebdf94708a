"""The app's widgets, one per module; each renders one kind of event and knows nothing of threads."""
