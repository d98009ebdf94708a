"""One decoding run: a loaded model, a prompt and a config, turned into a stream of events.

This is the top layer every front end uses (``decode-tui generate``, the TUI,
tests, benchmarks): it encodes and checks the prompt, picks the strategy for
the mode, seeds the generator and yields ``Started``, the strategy's events
and ``Finished``. The caller can stop at any time by no longer consuming;
:meth:`Run.cancel` asks the strategy to stop at the next step boundary, and
:meth:`Run.cancelled` builds the ``cancelled`` result after an interruption.

It knows which strategy serves which mode; it knows nothing about display.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable, Generator
from typing import Any

import torch

from .choosing.bad_words import token_bytes
from .choosing.grammar import Grammar, GrammarMask, check_path
from .choosing.sampling import StageContext
from .drafting.context import DraftingContext, builder
from .drafting.draft_models import DraftModel, load_draft
from .drafting.drafters import Drafter
from .drafting.suffix_drafting import SuffixHistory, history_files_for
from .errors import UsageError
from .execution.forward import graphs_available
from .execution.threads import use_threads
from .execution.tree_budget import tree_budget
from .live import LiveParams
from .model.acquire import drive
from .model.loading import LoadedModel, check_prompt_fits
from .modes import DRAFT_MODEL_MODES, DRAFTING_MODES, drafter_of
from .params import DecodeConfig
from .record.detokenize import Detokenizer, TokenLabels
from .record.events import Branched, Event, Finished, Started
from .record.path import Path, check_room
from .record.transcript import Transcript
from .strategies.autoregressive import autoregressive
from .strategies.beam import beam_search
from .strategies.speculative import speculative


class Run:
    """A prompt checked against the model, ready to decode."""

    def __init__(self, lm: LoadedModel, prompt: str, config: DecodeConfig,
                 draft: DraftModel | None = None, live: LiveParams | None = None, path: Path | None = None,
                 history: SuffixHistory | None = None) -> None:
        """``draft``: for speculative mode, the draft model
        (see :func:`~decode_tui.core.drafting.draft_models.load_draft`);
        built from ``config.draft`` when not given.
        ``live``: settings a front end may change mid-run (see :mod:`~decode_tui.core.live`).
        ``path``: tokens already decided (a branch: kept from a parent, then forced), emitted first; the run
        decodes on after them in its mode (see :mod:`~decode_tui.core.record.path`).
        ``history``: for suffix mode, the earlier outputs it drafts from (none: this run's own text only); the run
        reads it and never adds to it."""
        self.lm = lm
        self.live = live
        # A copy: what the run drafts from stays as it was when the run began (fair figures, suffix_drafting.py).
        self.history = history.snapshot() if history is not None else SuffixHistory()
        if config.draft.history:  # read once: a front end reads them first, saying so (only suffix takes them)
            self.history.files = drive(history_files_for(lm, config))
        loaded_here = config.mode in DRAFT_MODEL_MODES and draft is None
        if loaded_here:
            draft = load_draft(lm, config.draft.draft, named=config.draft.named)
        self.draft = draft
        self.config = config
        self.prompt = prompt
        self.prompt_ids = lm.encode_prompt(prompt, config.use_chat)
        self.notes: list[str] = []  # things a front end should tell the user, not errors
        if loaded_here and draft is not None and draft.note is not None:  # a draft given was announced by its loader
            self.notes.append(draft.note)
        self.branch = path if path is not None and path.ids else None  # the decided tokens it starts from
        max_new = config.max_new_tokens
        ctx = lm.context_length
        check_prompt_fits(len(self.prompt_ids), ctx, lm.name)
        if self.branch is not None:
            self._check_path(self.branch, max_new)
        self.tree_budget = self._tree_budget(config, ctx)
        if ctx is not None and len(self.prompt_ids) + max_new > ctx:
            max_new = ctx - len(self.prompt_ids)
            self.notes.append(f"max_new_tokens lowered to {max_new} to fit {lm.name}'s context of {ctx} tokens.")
        self.stages = self._stages(lm, config)
        if self.branch is not None:
            self._check_grammar(self.branch)
        self.seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        self.transcript = Transcript(config.mode, self.prompt_ids, Detokenizer(lm.tokenizer),
                                     lm.eos_token_ids, max_new)
        # CUDA graphs of the eager model: the default on CUDA, in every mode (beam search's batched step too).
        self.graphs = config.cuda_graphs and not config.compiles and graphs_available(lm.model)
        if config.fast and config.mode == "beam":
            self.notes.append("the fast path covers greedy, sampling and draft verification; beam search runs on "
                              + ("CUDA graphs of the eager model" if self.graphs else "the plain path"))

    def _check_path(self, path: Path, max_new: int) -> None:
        vocab = self.lm.model.get_output_embeddings().weight.shape[0]
        if any(not 0 <= t < vocab for t in path.ids):
            raise UsageError(f"The path holds a token id outside {self.lm.name}'s vocabulary of {vocab}: it was "
                             "made with another model. Branch from a run of this model.")
        check_room(path, len(self.prompt_ids), max_new, self.lm.context_length, self.lm.name)

    def _stages(self, lm: LoadedModel, config: DecodeConfig) -> StageContext:
        """What the stages need besides their values; the bad words tokenized and the grammar compiled now, so
        a bad one is refused before decoding starts."""
        grammar = None
        if config.constraint is not None:
            grammar = GrammarMask(Grammar(config.constraint, lm.tokenizer, lm.eos_token_ids), len(self.prompt_ids))
        stages = StageContext(eos_token_ids=tuple(sorted(lm.eos_token_ids)), prompt_length=len(self.prompt_ids),
                              token_bytes=functools.partial(token_bytes, lm.tokenizer),
                              grammar=grammar, device=str(lm.device))
        if config.sampling.bad_words:
            stages.bad_words(config.sampling.bad_words)
        return stages

    def _check_grammar(self, path: Path) -> None:
        """A path the grammar does not allow is refused: a forced token it forbids could never be decoded."""
        grammar = self.stages.grammar
        if not isinstance(grammar, GrammarMask):
            return
        check_path(grammar.grammar, self.lm.tokenizer, path.ids, len(path.kept))

    @property
    def path(self) -> str:
        """How the decoding steps run: ``plain``, ``cuda-graphs`` or ``compiled`` (``--fast``)."""
        if self.config.compiles:
            return "compiled"
        return "cuda-graphs" if self.graphs else "plain"

    def params(self) -> dict[str, Any]:
        params = {
            "mode": self.config.mode,
            "max_new_tokens": self.transcript.max_new_tokens,
            "seed": self.seed,
            "chat": self.config.use_chat and self.lm.chat,
            "device": str(self.lm.device),
            "dtype": str(self.lm.dtype).removeprefix("torch."),
            "fast": self.config.compiles,
            "path": self.path,
            # What ends the text: a what-if replay of this trace (core/analysis/whatif.py) cuts lookup copies where the
            # run did.
            "eos_token_ids": sorted(self.lm.eos_token_ids),
            **self.config.sampling.to_dict(),
        }
        if self.config.constraint is not None:
            params["constraint"] = self.config.constraint.to_dict()
        if self.config.mode == "beam":
            params.update(self.config.beam.to_dict(), beam_sample=self.config.beam_sample)
        if self.config.mode in DRAFTING_MODES:
            params.update(self.config.draft.to_dict(), draft_sample=self.config.draft_sample)
        return params

    def events(self) -> Generator[Event, None, None]:
        """``Started``, the strategy's events, ``Finished``. The time the caller holds this generator at a
        yield (a pause, a single step, a lesson's pause) is not decoding time: the transcript's clock leaves it
        out, so tok/s and elapsed mean the same after a pause as without one."""
        self.transcript.start_clock()
        events = self._events()
        try:
            for event in events:
                if isinstance(event, Finished) and isinstance(self.stages.grammar, GrammarMask):
                    event = dataclasses.replace(
                        event, constraint_complete=self.stages.grammar.grammar.complete(list(event.token_ids)))
                held = time.perf_counter()
                yield event
                self.transcript.held(time.perf_counter() - held)
        finally:
            events.close()  # a caller that stops consuming stops the strategy now: its finally blocks roll back

    def _events(self) -> Generator[Event, None, None]:
        use_threads(self.lm.model)  # the count the warm-up chose, on the thread that decodes
        label = TokenLabels(self.lm.tokenizer)
        notes: list[str] = []
        drafter = self._drafter(notes.append) if self.config.mode in DRAFTING_MODES else None
        try:
            yield Started(mode=self.config.mode, model=self.lm.name, prompt_token_ids=tuple(self.prompt_ids),
                          prompt_text=self.prompt, params=self.params(),
                          prompt_pieces=tuple(label(t) for t in self.prompt_ids), notes=tuple(notes) or None)
            branch = self.branch
            if branch is not None:
                yield Branched(branch=branch.branch, parent=branch.parent, position=len(branch.kept),
                               forced_token_ids=branch.forced, forced_text=branch.forced_text)
        except GeneratorExit:  # stopped before the strategy that closes it began
            if drafter is not None:
                drafter.close()
            raise
        generator = torch.Generator(device=self.lm.device).manual_seed(self.seed)
        if self.config.mode == "beam":
            yield from beam_search(
                self.lm.model,
                self.transcript,
                self.config.beam,
                self.config.sampling,
                do_sample=self.config.beam_sample,
                generator=generator,
                label=label,
                decode=self.transcript.detokenizer.decode,
                live=self.live,
                graphs=self.graphs,
                path=branch,
                stages=self.stages,
            )
            return
        if drafter is not None:
            yield from speculative(
                self.lm.model,
                self.transcript,
                drafter,
                self.config.sampling,
                greedy=not self.config.draft_sample,
                num_draft_tokens=drafter.draft_length(self.config.draft),
                adaptive=self.config.draft.adaptive,
                vocab_size=self.draft.vocab_size if self.draft else None,
                generator=generator,
                label=label,
                live=self.live,
                fast=self.config.fast,
                graphs=self.graphs,
                path=branch,
                stages=self.stages,
            )
            return
        yield from autoregressive(
            self.lm.model,
            self.transcript,
            self.config.sampling,
            greedy=self.config.mode == "greedy",
            generator=generator,
            label=label,
            top_n=self.config.top_n,
            live=self.live,
            fast=self.config.fast,
            graphs=self.graphs,
            path=branch,
            stages=self.stages,
        )

    def _tree_budget(self, config: DecodeConfig, ctx: int | None) -> int:
        """Nodes per verification when drafts are trees (0: chains): the user's where the mode's drafter drafts
        trees when asked (prompt lookup's every match, a draft model's runners-up), else the device's measured budget
        where it drafts trees by default (suffix drafting; :mod:`~decode_tui.core.execution.tree_budget`);
        refused where the prompt leaves no room for that wide a verification."""
        draft, drafter = config.draft, drafter_of(config.mode)
        if drafter is None or drafter.trees == "no":
            return 0
        budget = draft.tree_budget or (tree_budget(self.lm.model) if drafter.trees == "measured" else 0)
        if budget and ctx is not None and draft.tree_budget is None:  # a measured budget is cut to fit, not refused
            budget = max(1, min(budget, ctx - len(self.prompt_ids) - 1))
        if draft.tree_budget is not None and ctx is not None and len(self.prompt_ids) + budget + 1 > ctx:
            raise UsageError(f"--tree-budget {budget} does not fit: the prompt is {len(self.prompt_ids)} tokens and "
                             f"{self.lm.name} reads at most {ctx}. Give a budget under {ctx - len(self.prompt_ids)}.")
        return budget

    def _drafter(self, say: Callable[[str], None] = lambda _note: None) -> Drafter:
        """The mode's drafter, from the builder its entry names (core/modes.py); ``say`` takes what it tells the
        user as the run starts."""
        return builder(self.config.mode)(DraftingContext(
            lm=self.lm, params=self.config.draft, eos_token_ids=self.lm.eos_token_ids,
            prompt_length=len(self.prompt_ids), tree_budget=self.tree_budget, draft=self.draft, history=self.history,
            say=say))

    def cancel(self) -> None:
        """Ask the strategy to stop at its next step boundary (thread-safe)."""
        self.transcript.request_cancel()

    def cancelled(self) -> Finished:
        """The ``cancelled`` result for a run whose consumer stopped early."""
        return self.transcript.finished("cancelled")
