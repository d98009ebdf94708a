"""What a run says: the events, the transcript and its detokeniser, draft statistics, the timeline, the paths a
run starts from and the reading of event files (traces and recordings).

Plain data and bookkeeping: nothing here runs a model.
"""
