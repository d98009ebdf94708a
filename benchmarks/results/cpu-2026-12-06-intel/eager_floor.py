"""floor_priced.py with the target's attention set to transformers' eager implementation after loading (this folder's
README, "Why bfloat16's texts part from greedy's"): ``python eager_floor.py [floor_priced.py's arguments]``."""

import runpy
import sys
from typing import Any

import decode_tui.core.model.loading as loading

loaded = loading.load_model


def load_model(*args: Any, **kwargs: Any) -> Any:
    lm = loaded(*args, **kwargs)
    lm.model.set_attn_implementation("eager")
    print("attention:", lm.model.config._attn_implementation, lm.dtype, file=sys.stderr, flush=True)
    return lm


loading.load_model = load_model
sys.argv = ["floor_priced.py", *sys.argv[1:]]
runpy.run_path("benchmarks/floor_priced.py", run_name="__main__")
