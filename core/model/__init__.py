"""Finding and loading weights: the registry of names, the embedded model, downloads and the loaded model.

Above the record and the settings; it knows nothing of forwards or decoding.
"""
