"""floor_priced.py with the target's attention set to transformers' eager implementation after loading."""
import runpy, sys
import decode_tui.core.model.loading as loads
orig = loads.load_model
def load_model(*a, **k):
    lm = orig(*a, **k)
    lm.model.set_attn_implementation("eager")
    print("attention:", lm.model.config._attn_implementation, lm.dtype, file=sys.stderr, flush=True)
    return lm
loads.load_model = load_model
sys.argv = ["floor_priced.py", *sys.argv[1:]]
runpy.run_path("benchmarks/floor_priced.py", run_name="__main__")
