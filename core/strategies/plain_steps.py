"""Plain target steps inside a speculative run, run as the autoregressive loop runs them.

Where the adaptive policy has decided that drafting does not pay, the speculative loop hands it a stretch of
one-token steps (until its next probe or replay); where a lookup found nothing to copy, a stretch that looks
again after each token, while the next forward runs, and ends where a copy turns up. A round of the
speculative loop with nothing drafted is a verification of one token: fed at the verification's padded width
on the graph paths, read back before the next forward is queued, then turned into events. On a GPU, where a
step of a small model takes a few milliseconds, such a round costs more than a plain greedy step, so a policy
that rightly stopped drafting would still lose greedy's speed, and prompt lookup on prose, which finds little to
copy, would lose more. Here each step feeds the one pending token, and the
next step's forward is queued on the device before this step's token is read back, as in
:func:`~decode_tui.core.strategies.autoregressive.autoregressive`. The tokens are the verification's: the argmax
of the processed distribution, or one draw from it with the run's generator (the draw a round with nothing
drafted makes), with the same figures.

It knows the model call, the sampling stages and the transcript; nothing of drafters (``look``, ``learn`` and
``seen`` are the loop's), the policy or events beyond the emitted tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING

import torch

from ..execution.figures import host_stats, token_stats
from ..execution.forward import forward, rollback
from ..execution.transfers import HostCopy, on_device
from ..live import LiveParams
from ..record.events import Event
from ..record.transcript import Transcript
from .acceptance import distributions

if TYPE_CHECKING:
    from transformers import Cache, LogitsProcessor, PreTrainedModel

    from ..drafting.drafters import Draft
    from ..record.events import Stage


@torch.inference_mode()
def plain_steps(
    model: PreTrainedModel,
    cache: Cache,  # holds every token of ``context`` but the last (the pending one)
    transcript: Transcript,
    context: list[int],  # prompt and output so far; grows by each emitted token
    steps: int,
    processors: list[tuple[Stage, LogitsProcessor]],
    greedy: bool,
    generator: torch.Generator | None,
    vocab: slice,  # the logits' columns a token may come from (the vocabulary a drafter shares with the target)
    live: LiveParams | None = None,  # a front end's parameters: a change ends the stretch, for the loop to apply
    version: int = 0,  # the version of them this stretch runs under
    run_ahead: bool | None = None,  # queue each forward before the last token is read back (default: on CUDA)
    look: Callable[[], Draft] | None = None,  # a drafter's proposal for the context as it is now
    learn: Callable[[Sequence[int], torch.Tensor], None] | None = None,  # a learning drafter's: each step's logits
    seen: Callable[[int], None] | None = None,  # each emitted token (shadow rounds walk their trees with them)
) -> Generator[Event, None, tuple[int, float, Draft | None]]:
    """Up to ``steps`` plain steps, each token emitted as the target's; returns how many steps ran, their
    seconds, less the time the caller spent on their events (a verification's time leaves that out too), and
    the draft that ended the stretch, if one did: ``look`` is asked after each step's token (on a GPU while the
    next forward runs), and a draft that proposes something ends the stretch for the loop to verify.

    The cache again holds every token of ``context`` but the last when it returns, as between two rounds: a
    forward queued ahead for a step that never came (the run ended, or was cancelled) is rolled back.
    """
    if run_ahead is None:
        run_ahead = model.device.type == "cuda"  # on a CPU nothing would overlap
    started = time.perf_counter()
    outside = 0.0  # seconds the caller held an event
    feed = on_device([context[-1:]], model.device)  # [1, 1] the pending token
    raw = forward(model, feed, cache)[0]  # [1, V]
    transcript.target_forwards += 1
    done, found = 0, None
    try:
        for step in range(steps):
            if learn is not None:
                learn(context[-1:], raw)  # [1, V] after the pending token
            p = distributions(processors, context, [], raw[:, vocab])  # [1, V]
            token = p[0].argmax(-1, keepdim=True) if greedy else torch.multinomial(p[0], 1, generator=generator)
            figures = token_stats(raw, token)  # [3, 1]
            more = step + 1 < steps and transcript.remaining > 1
            # The copy is queued before the next forward, so waiting for it does not wait for that forward too
            # (a copy queued after it would): the host turns this step into events while the device runs it.
            copy = HostCopy([token, figures])
            if run_ahead and more:
                raw = forward(model, token.view(1, 1), cache)[0]  # [1, V]
            host = copy.wait()
            token_id = int(host[0])
            emitted = transcript.emit(token_id, "target", host_stats(host[1:], 1)[0])
            context.append(token_id)
            if seen is not None:
                seen(token_id)
            done += 1
            handed = time.perf_counter()
            yield emitted
            outside += time.perf_counter() - handed
            if not more or transcript.done or transcript.cancel_requested or (
                    live is not None and live.version != version):
                break
            if look is not None and (draft := look()).token_ids:
                found = draft  # the forward queued ahead is rolled back below: the verification feeds this token
                break
            if not run_ahead:
                raw = forward(model, token.view(1, 1), cache)[0]  # [1, V]
            transcript.target_forwards += 1
    finally:
        rollback(cache, len(context) - 1)  # the pending token is fed by whatever comes next
    return done, time.perf_counter() - started - outside, found
