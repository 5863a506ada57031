"""Boilerplate across documents (``stage.py``)."""
