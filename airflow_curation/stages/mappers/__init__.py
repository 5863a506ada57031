"""Mappers: where a stage's units run. Each is a ``UnitMapper`` factory (see ``stages.base``), sized by
``budget``; ``ray`` says which Ray the Ray mapper (and Daft's Ray runner) use."""
