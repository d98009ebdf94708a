"""Turning logits into a token: the sampling stages, banned words, grammars and their constraints, and the
multi-draft rule for token trees.

It never edits the logits it is given, and draws with the run's own ``torch.Generator``.
"""
