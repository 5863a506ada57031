"""Preprocess stage: quality signals and keep/drop decisions as additive columns, on Dask."""
