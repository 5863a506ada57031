"""Quality classifier: a fastText-style linear model over hashed word n-grams, trained by
``curation quality-train`` and scored by the ``quality`` stage (see docs/quality.md)."""
