"""Enrichment: classify, score, generate and embed as additive columns (Ray Data + vLLM, or transformers)."""
