"""Who proposes drafts: the Drafter protocol and every drafter (a draft model, prompt lookup, suffix drafting),
their trees, the int4/int8 drafts made from the target, and exact replays of a finished run's drafting.

It knows proposing; verifying is the strategies'.
"""
