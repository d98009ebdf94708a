"""Where the app's live events come from: a run on a model.

:class:`ModelRunner` turns :class:`~decode_tui.tui.settings.Settings` into an
event source. The source runs in the decoder thread: it pulls the embedded
model the first time, loads the model (announcing it with a ``Notice`` so the
UI shows a loading state and stays usable), keeps loaded models for the next
restart, and yields the run's events. Recordings (writing one as a run goes,
reading one back and replaying it at its pace) are tui/recording.py's.

It knows the core's loading and run API; nothing about widgets.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, TypeVar

from ..core.live import LiveParams
from ..core.modes import DRAFT_MODEL_MODES
from ..core.record.events import Event, Finished, TokenEmitted
from .branches import BranchRequest
from .pump import EventSource, Notice
from .settings import Settings

# What the app starts each run from: its settings and the live parameters a front end may change mid-run.
SourceFactory = Callable[[Settings, LiveParams], EventSource]

if TYPE_CHECKING:
    from ..core.drafting.draft_models import DraftModel
    from ..core.drafting.suffix_drafting import SuffixHistory
    from ..core.model.loading import LoadedModel
    from ..core.model.registry import ResolvedModel
    from ..core.record.path import Path as DecodePath



def _path_of(request: BranchRequest, lm: LoadedModel) -> DecodePath:
    """The core's path for a branch the app asked for; a typed text is tokenized here, where the tokenizer is."""
    from ..core.record.path import Path, forced_tokens

    forced = request.forced_ids or forced_tokens(lm.tokenizer, lm.name, request.forced_text)
    return Path(kept=request.kept, kept_sources=request.kept_sources,
                kept_stats=request.kept_stats,
                forced=forced, forced_text=request.forced_text, branch=request.branch, parent=request.parent,
                forced_stats=request.forced_stats)

T = TypeVar("T")


class ModelRunner:
    """Builds live event sources, keeping the loaded models between runs (a restart must not reload).

    Needs no lock: runs never overlap (the pump starts a run only after the previous one has ended).
    """

    def __init__(self, background_compile: bool = False) -> None:
        """``background_compile``: on CUDA, compile the captured passes in the background after a warm-up and
        switch to them when ready (core/execution/background_compile.py). Off unless asked: decoding is much slower
        while
        the worker compiles, and a process that started one has to end with ``os._exit`` (cli/commands.py)."""
        self.background_compile = background_compile
        self._said_nothing_to_compile = False  # a run with no captured passes says so once, not at every restart
        self._models: dict[tuple[str, str, str, str | None, bool], LoadedModel] = {}
        self._drafts: dict[tuple[str, str, str, str], DraftModel] = {}
        self._warm: set[tuple[str, str]] = set()  # (mode, draft) warmed up on the loaded model
        # Every finished run's output in this session, for suffix drafting's tree of earlier runs (a restart, a
        # branch, another mode's run of the same prompt); kept for the loaded model only: ids mean nothing to another.
        self._history: SuffixHistory | None = None

    def source(self, settings: Settings, live: LiveParams) -> EventSource:
        def events() -> Iterator[Event]:
            lm = yield from self._model(settings)
            draft = None
            if settings.mode in DRAFT_MODEL_MODES:
                draft = yield from self._draft(settings, lm)
            yield from self._warm_up(settings, lm, draft)
            from ..core.run import Run

            path = _path_of(settings.branch, lm) if settings.branch is not None else None
            history = self._session_history()
            run = Run(lm, settings.prompt, settings.config, draft, live, path=path, history=history)
            for note in run.notes:
                yield Notice("note", note)
            if run.graphs and self.background_compile:
                yield from _compile_behind(lm)
            elif self.background_compile and not self._said_nothing_to_compile:
                self._said_nothing_to_compile = True
                yield Notice("note", f"--background-compile does nothing here: {_nothing_to_compile(lm, settings)}")
            if settings.for_timing and (yield from _settle(lm)):
                from ..core.warmup import warm_up

                warm_up(lm, settings.prompt, settings.config, draft)  # its graphs switch here, not in a timed run
            events = _compile_news(lm, run.events())
            try:
                for event in events:
                    if isinstance(event, Finished) and event.finish_reason != "cancelled":
                        history.add(event.token_ids, f"run {len(history) + 1} ({event.mode})")
                    yield event
            finally:
                events.close()  # a run stopped here stops now: its finally blocks roll its caches back

        return events

    def _session_history(self) -> SuffixHistory:
        if self._history is None:
            from ..core.drafting.suffix_drafting import SuffixHistory

            self._history = SuffixHistory()
        return self._history

    def _warm_up(self, settings: Settings, lm: LoadedModel, draft: DraftModel | None,
                 ) -> Generator[Event, None, None]:
        """A mode's first run on a model is warmed up first, so its speed is not a cold start's (core/warmup.py)."""
        key = (settings.mode, settings.config.draft.draft if settings.mode in DRAFT_MODEL_MODES else "")
        if key in self._warm:
            return
        from ..core.warmup import describe, reads_history, warming

        what = describe(lm, settings.config)
        first = "; ".join(part for part in (reads_history(settings.config), what) if part)
        yield Notice("loading", f"warming up {settings.mode}{' and ' + first if first else ''}…")
        steps = warming(lm, settings.prompt, settings.config, draft)
        while True:  # how far along, a line a token or a draft round: a wait of tens of seconds says what it does
            try:
                yield Notice("loading", f"{next(steps)}{'; ' + what if what else ''}…")
            except StopIteration as done:
                seconds = done.value
                break
        if settings.config.compiles:
            yield Notice("note", f"compiled and warmed up in {seconds:.1f} s")
        self._warm.add(key)

    def _model(self, settings: Settings) -> Generator[Event, None, LoadedModel]:
        key = (settings.model, settings.device, settings.dtype, settings.device_map, settings.config.fast)
        cached = self._models.get(key)
        if cached is not None:
            return cached
        resolved = yield from _ensure(settings.model)
        yield Notice("loading", f"loading {resolved.display_name}…")
        from ..core.startup import importing_torch

        torch_s = yield from _said(importing_torch(), f"loading {resolved.display_name}: ")
        from ..core.model.loading import loading

        lm = yield from _said(loading(resolved, device=settings.device, dtype=settings.dtype,
                                      trust_remote_code=settings.trust_remote_code, device_map=settings.device_map,
                                      compiled=settings.config.fast))
        if torch_s:
            lm.timings["torch"] = round(torch_s, 3)
        self._models = {key: lm}  # keep one model: switching models frees the old one
        self._history = None
        self._drafts.clear()
        self._warm.clear()
        return lm

    def _draft(self, settings: Settings, lm: LoadedModel) -> Generator[Event, None, DraftModel]:
        """The draft model sharing the target's vocabulary, announced while it is built."""
        spec = settings.config.draft.draft
        key = (settings.model, settings.device, settings.dtype, spec)
        cached = self._drafts.get(key)
        if cached is not None:
            return cached
        model_spec = settings.config.draft.model_spec
        if model_spec is not None:
            # A clear message for a draft that is not on disk, before anything heavy.
            yield from _ensure(model_spec, "--draft")
        yield Notice("loading", f"preparing the draft model ({spec})…")
        from ..core.drafting.draft_models import load_draft

        draft = load_draft(lm, spec, settings.trust_remote_code, named=settings.config.draft.named)
        if draft.note is not None:
            yield Notice("note", draft.note)
        self._drafts[key] = draft
        return draft



def _said(steps: Generator[str, None, T], prefix: str = "") -> Generator[Event, None, T]:
    """Run a core generator of progress lines (loading, importing), each line a loading notice; its value."""
    while True:
        try:
            line = next(steps)
        except StopIteration as done:
            value: T = done.value
            return value
        yield Notice("loading", f"{prefix}{line[:1].lower()}{line[1:]}…")


def _nothing_to_compile(lm: LoadedModel, settings: Settings) -> str:
    """Why a run has no captured passes for the background compile to compile (it compiles what CUDA graphs replay)."""
    if settings.config.compiles:
        return "--fast compiled the decoding passes before the run"
    if not settings.config.cuda_graphs:
        return "--no-cuda-graphs takes the plain path, which replays no captured passes"
    device = lm.model.device.type
    if device != "cuda":
        return f"it compiles what CUDA graphs replay, and on {device} there are none (--fast compiles anywhere)"
    return "this model's passes are not replayed as CUDA graphs (its capture failed, or its layers span devices)"


def _compile_behind(lm: LoadedModel) -> Generator[Event, None, None]:
    """Start the background compile of ``lm``'s captured passes, once per model, and say so."""
    from ..core.execution import background_compile

    if background_compile.progress(lm.model) is None:
        background_compile.start(lm.model)
        yield Notice("note", "compiling the decoding passes in the background; CUDA graphs of the eager model "
                             "serve until then, and the run switches to the compiled ones between two steps")


def _settle(lm: LoadedModel) -> Generator[Event, None, bool]:
    """A timed run (a race) waits for the background compile, so no figure mixes the two kinds of kernel.
    True if ``lm`` compiles in the background: the run's graphs may then switch at their next pass."""
    from ..core.execution import background_compile

    now = background_compile.progress(lm.model)
    if now is None:
        return False
    if not background_compile.settled(lm.model):
        yield Notice("loading", f"{now.describe()}; timed runs wait for it, so each one runs the same kernels…")
        background_compile.wait(lm.model)
    return True


def _compile_news(lm: LoadedModel, events: Iterator[Event]) -> Generator[Event, None, None]:
    """The run's events, with the kernels its passes run on (for the stats bar) whenever that changes, and a
    note when they switch to compiled kernels (or their compile fails)."""
    from ..core.execution import background_compile

    last = background_compile.progress(lm.model)
    if last is None:
        yield from events  # nothing compiles behind this model
        return
    yield Notice("kernels", last.label())
    tokens = 0
    for event in events:
        yield event
        tokens += isinstance(event, TokenEmitted)
        now = background_compile.progress(lm.model)
        assert now is not None
        if now == last:  # the usual case, at every event: nothing to format
            continue
        if now.label() != last.label():
            yield Notice("kernels", now.label())
        if now.switched > last.switched:
            yield Notice("note", f"switched to compiled kernels after token {tokens} "
                                 f"({now.seconds:.1f} s of compiling in the background)")
        elif (now.failure, now.refused) != (last.failure, last.refused):
            yield Notice("note", now.describe())
        last = now

def _ensure(spec: str, flag: str = "--model") -> Generator[Event, None, ResolvedModel]:
    """The files for ``spec`` (core/model/acquire.py); a first fetch of the embedded model is announced before it
    starts, as the pull cannot yield its progress. ``flag``: the option the spec came from, which an error names."""
    from ..core.model.acquire import ensure, fetching

    what = fetching(spec)
    if what is not None:
        yield Notice("loading", what)
    return ensure(spec, flag=flag)
