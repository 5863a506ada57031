"""Engines: where a stage's units run. Each is a ``UnitMapper`` factory (see ``stages.base``)."""
