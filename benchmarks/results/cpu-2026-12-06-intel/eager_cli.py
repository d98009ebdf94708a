"""``decode-tui`` with the target's attention set to transformers' eager implementation after loading (this folder's
README, "Every category in bfloat16 with eager attention"): ``python eager_cli.py [decode-tui's arguments]``."""

import sys
from typing import Any

import decode_tui.core.model.loading as loading
from decode_tui.cli.main import main

loaded = loading.load_model


def load_model(*args: Any, **kwargs: Any) -> Any:
    lm = loaded(*args, **kwargs)
    lm.model.set_attn_implementation("eager")
    return lm


loading.load_model = load_model
sys.argv = ["decode-tui", *sys.argv[1:]]
main()
