"""Load a resolved model and its tokenizer onto a device, and prepare prompts.

Device ``auto`` picks cuda, then mps, then cpu; dtype ``auto`` picks bf16 on
CUDA where the card supports it, fp16 on MPS, and on the CPU bf16 where its cores
multiply bf16 in hardware (AMX or AVX512-BF16; the model then made ready for them:
:mod:`.cpu_bf16`), else fp32. Remote code runs only when the caller asks for it. The tokenizer is loaded before the
model so a bad prompt is reported before the slow part.

This module knows how to get a model into memory; it knows nothing about
decoding strategies or how anything is shown.
"""

from __future__ import annotations

import gc
import re
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..errors import ModelLoadError, UsageError
from ..params import check_device_map
from . import cpu_bf16
from .acquire import drive
from .registry import CONTEXT_KEYS, ResolvedModel

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")

# Chat end markers that some checkpoints leave out of generation_config's
# eos_token_id although the chat template closes every turn with them.
_CHAT_END_MARKERS = ("<|im_end|>", "<|end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>", "</s>")


def resolve_device(name: str = "auto") -> torch.device:
    """Turn ``auto|cpu|mps|cuda[:N]`` into a device that exists here, or raise a UsageError."""
    if not _DEVICE.match(name):
        raise UsageError(f"Unknown device {name!r}. Use auto, cpu, cuda, cuda:N or mps.")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name} was asked for, but this machine has no CUDA device that torch "
                             "can use. Use --device cpu (or auto).")
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s). "
                             "Pick one of them, or use auto.")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UsageError("--device mps was asked for, but MPS is not available here. Use --device cpu (or auto).")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device, spread: bool = False, compiled: bool = False) -> torch.dtype:
    """The dtype ``name`` means on ``device``; ``spread``: the model is spread by a device map (whose layers on the
    CPU or the disk :mod:`.cpu_bf16` does not prepare, so ``auto`` keeps float32 there); ``compiled``: its steps run
    through ``torch.compile`` (``--fast``), which on a CPU keeps a step's bits at every width only in float32, so
    ``auto`` means float32 there and a narrower dtype is refused."""
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "mps":
            return torch.float16
        return torch.bfloat16 if cpu_bf16.bf16_products() and not spread and not compiled else torch.float32
    if name not in DTYPES:
        raise UsageError(f"Unknown dtype {name!r}. Use auto, {', '.join(DTYPES)}.")
    if compiled and device.type == "cpu" and DTYPES[name] != torch.float32:
        # Inductor cannot lower the packed products of a prepared bfloat16 model (.cpu_bf16), and where they are
        # opaque to it, its kernels fuse what the eager model rounds between ops, differently at each width: a
        # verification's bits are not its steps', and drafting does not give greedy's text.
        raise UsageError(f"--fast with --dtype {name} on the CPU: compiled {name} steps round differently from "
                         "pass to pass, so drafting would not give greedy's tokens. Leave out --dtype (--fast "
                         "loads float32 on a CPU) or leave out --fast.")
    return DTYPES[name]


@dataclass
class LoadedModel:
    """A model ready to decode with, and the facts about it the strategies need."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    eos_token_ids: frozenset[int]
    context_length: int | None
    chat: bool = field(default=False)  # whether a chat template is available
    # Seconds per loading phase ("model code", "cuda", "tokenizer", "weights"), for benchmarks and the curious.
    timings: dict[str, float] = field(default_factory=dict)

    def encode_prompt(self, prompt: str, use_chat: bool = True) -> list[int]:
        """Token ids for a prompt: the chat template applied when the model has one, unless use_chat is off."""
        return encode_prompt(self.tokenizer, prompt, use_chat and self.chat)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, use_chat: bool) -> list[int]:
    if not prompt.strip():
        raise UsageError("The prompt is empty. Pass --prompt TEXT or --prompt-file FILE with some text.")
    if "\0" in prompt:
        # A NUL is no text a model was trained on, and usually means a binary file was read as the prompt.
        raise UsageError(f"The prompt holds a NUL character (at character {prompt.index(chr(0))}): is it a binary "
                         "file? Pass a text prompt, or remove the NUL bytes.")
    surrogate = next((i for i, c in enumerate(prompt) if "\ud800" <= c <= "\udfff"), None)
    if surrogate is not None:
        # Python's stand-in for bytes that did not decode (surrogateescape): no tokenizer takes it.
        raise UsageError(f"The prompt holds a lone surrogate (at character {surrogate}), which is not text: was it "
                         "decoded from bytes that are not UTF-8? Decode it as UTF-8, or with errors='replace'.")
    if use_chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        # The template already wrote any BOS token it wants.
        return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Every token that ends a generation: generation config, tokenizer, and the chat template's turn end."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value: Any = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    template = getattr(tokenizer, "chat_template", None) or ""
    vocab = tokenizer.get_vocab()
    for marker in _CHAT_END_MARKERS:
        if marker in template and marker in vocab:
            ids.add(int(vocab[marker]))
    return frozenset(ids)


def context_length(model: PreTrainedModel) -> int | None:
    return _context_of(model.config)


def check_prompt_fits(prompt_length: int, context: int | None, model: str) -> None:
    """A UsageError where a prompt of ``prompt_length`` tokens leaves ``model`` (reading ``context`` at most) no room
    for one new token."""
    if context is not None and prompt_length >= context:
        raise UsageError(f"The prompt is {prompt_length} tokens long, but {model} reads at most {context} tokens. "
                         "Shorten the prompt.")


def configured_context_length(resolved: ResolvedModel, trust_remote_code: bool = False) -> int | None:
    """The context length from the model's config alone (milliseconds, no weights), for checks made before a
    model loads; None where the config does not say or cannot be read (the load then checks)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(resolved.path, gguf_file=resolved.gguf_file,
                                            trust_remote_code=trust_remote_code)
    except Exception:
        return None
    return _context_of(config)


def _context_of(config: Any) -> int | None:
    for attr in CONTEXT_KEYS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def load_tokenizer(resolved: ResolvedModel, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            resolved.path, gguf_file=resolved.gguf_file, trust_remote_code=trust_remote_code
        )
    except Exception as exc:
        raise _load_error(resolved, "tokenizer", exc, trust_remote_code) from exc


def loading(
    resolved: ResolvedModel,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None,
    device_map: str | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    check: Callable[[PreTrainedTokenizerBase], None] | None = None,
    compiled: bool = False,
) -> Generator[str, None, LoadedModel]:
    """Load a resolved model (and its tokenizer unless given) in eval mode on the chosen device.

    ``check`` is called with the tokenizer before the weights load, to refuse what the tokenizer alone can tell
    (a prompt too long for the model, a draft of another vocabulary) without the wait for the weights, minutes
    for a big model on a CPU.

    The weights go straight to the device in the dtype asked for, tensor by tensor (transformers'
    ``device_map``), never as a whole fp32 copy in host memory first. ``device_map`` (auto, balanced,
    sequential) instead spreads the layers over every GPU of the host with accelerate's big-model
    inference, the CPU and then the disk taking what does not fit (``max_memory`` caps each device);
    the run's input ids then go to the first layer's device, and the logits come from the last.

    Everything alive once the model is in (the model, torch, transformers) is then moved out of the
    cyclic garbage collector's sight with ``gc.freeze()``: otherwise every full collection walks
    those objects again, and one that lands mid-run stalls decoding, and the app's thread with it. The next
    load unfreezes first, so a model that is replaced can still be collected.

    ``compiled``: the run will compile its steps (``--fast``), which picks the dtype on a CPU (:func:`resolve_dtype`).

    A generator: it yields each phase's line as the phase starts (a front end shows it: no wait is silent)
    and returns the model; :func:`load_model` is the same as a call. The seconds each phase took end up in
    ``LoadedModel.timings``. transformers' own start-up is named as such: on a fresh machine it is most of
    the wait (BENCHMARKS.md, "Time to first token"), and nobody should take it for the model's.
    """
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[phase] = round(now - clock, 3)
        clock = now

    # transformers imports its model code lazily, on first use, which can take longer than reading a small
    # model's weights: named as phases of their own so nobody mistakes them for the weights.
    if "transformers.modeling_utils" not in sys.modules:
        yield f"Loading {resolved.display_name}: importing transformers (its own start-up, once a process)"
    from transformers.utils import logging as hf_logging

    lap("transformers")
    yield f"Loading {resolved.display_name}: importing transformers' model code for it"
    _import_model_code(resolved, trust_remote_code)
    lap("model code")

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    check_device_map(device, device_map)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev, spread=device_map is not None, compiled=compiled)
    if dev.type == "cuda":
        yield f"Loading {resolved.display_name}: starting CUDA on {dev}"
        torch.empty(0, device=dev)  # the context, made now so that the weights' phase is only the weights
        lap("cuda")
    gc.unfreeze()  # what an earlier load froze may be about to be dropped (a model switch)
    if tokenizer is None:
        yield f"Loading {resolved.display_name}: tokenizer"
        tokenizer = load_tokenizer(resolved, trust_remote_code)
        lap("tokenizer")
    if check is not None:
        check(tokenizer)
    yield f"Loading {resolved.display_name}: weights onto {device_map or dev} in {str(dt).removeprefix('torch.')}"
    model, dev = _weights(resolved, dev, dt, trust_remote_code, device_map, max_memory)
    model.eval()
    if dev.type == "cpu" and dt == torch.bfloat16 and device_map is None and cpu_bf16.bf16_products():
        cpu_bf16.prepare(model)
    _settle_heap()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # copies still queued belong to the weights' phase
    lap("weights")
    return LoadedModel(
        name=resolved.display_name,
        model=model,
        tokenizer=tokenizer,
        device=dev,
        dtype=dt,
        eos_token_ids=eos_token_ids(model, tokenizer),
        context_length=context_length(model),
        chat=bool(getattr(tokenizer, "chat_template", None)),
        timings=timings,
    )


def _weights(resolved: ResolvedModel, dev: torch.device, dt: torch.dtype, trust_remote_code: bool,
             device_map: str | None, max_memory: dict[int | str, int | str] | None) -> tuple[Any, torch.device]:
    """The model's weights, each tensor straight onto ``dev`` in ``dt`` (or spread by ``device_map``), and the
    device its inputs go to."""
    from transformers import AutoModelForCausalLM

    placement: dict[str, Any] = {"device_map": {"": str(dev)}}  # every tensor straight to the device
    if device_map is not None:
        from .registry import cache_root

        placement = {"device_map": device_map, "max_memory": max_memory,
                     "offload_folder": str(cache_root() / "offload" / resolved.display_name.replace("/", "--"))}
    try:
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path, gguf_file=resolved.gguf_file, dtype=dt, trust_remote_code=trust_remote_code, **placement
        )
    except Exception as exc:
        raise _load_error(resolved, "model", exc, trust_remote_code) from exc
    if device_map is not None:
        dev = input_device(model)
    return model, dev


def load_model(
    resolved: ResolvedModel,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None,
    device_map: str | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    progress: Callable[[str], None] | None = None,
    check: Callable[[PreTrainedTokenizerBase], None] | None = None,
    compiled: bool = False,
) -> LoadedModel:
    """:func:`loading` as a call: ``progress`` hears each phase's line as it starts."""
    return drive(loading(resolved, device, dtype, trust_remote_code, tokenizer, device_map, max_memory, check,
                         compiled), progress)


def _import_model_code(resolved: ResolvedModel, trust_remote_code: bool) -> None:
    """Import the modelling module of ``resolved``'s architecture (what ``from_pretrained`` would import lazily)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if resolved.gguf_file is not None:  # its config is read from the weights file: leave that to from_pretrained
        return
    try:
        config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=trust_remote_code)
        MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # the lookup imports the module
    except Exception:  # only an early import: from_pretrained reports whatever is wrong, in full
        pass


def input_device(model: PreTrainedModel) -> torch.device:
    """Where a model's input ids go: its input embeddings' device (the first layer's, when it is spread)."""
    embeddings = model.get_input_embeddings()
    weight = getattr(embeddings, "weight", None)
    if weight is not None and weight.device.type != "meta":
        return torch.device(weight.device)
    # Offloaded (its weight on "meta"): where accelerate placed the first module, a GPU index or a name.
    first = next(iter((getattr(model, "hf_device_map", None) or {}).values()), "cpu")
    if isinstance(first, int):
        return torch.device("cuda", first)
    return torch.device("cpu" if first in ("disk", "meta") else first)


def _settle_heap() -> None:
    """Collect what loading left behind, then freeze what stays (see :func:`load_model`)."""
    gc.collect()
    gc.freeze()


def _load_error(resolved: ResolvedModel, what: str, exc: Exception, trust: bool) -> ModelLoadError:
    hint = ""
    if "trust_remote_code" in str(exc) and not trust:
        hint = " This checkpoint needs its own code: pass --trust-remote-code if you trust its source."
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelLoadError(f"Could not load the {what} of {resolved.display_name} from {resolved.path}: "
                          f"{first_line}.{hint}")
