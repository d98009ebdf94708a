"""How a target forward runs: the one forward call, static caches and CUDA graphs, compile, float masks,
padded widths, the prefill, tree attention, the kept prefix and each model's memories of all this.

Strategies reach it through a few calls (``forward``, ``prefill``, ``VerifyForward``); it knows nothing of why a
forward is run.
"""
