"""Export: tokenize's packed sequences, globally shuffled, in the trainers' formats (see docs/export.md)."""
