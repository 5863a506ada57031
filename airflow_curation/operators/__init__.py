"""Stage operators: each launches one stage as a backend job (``base.CurationStageOperator``)."""
