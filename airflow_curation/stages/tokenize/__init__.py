"""Tokenize and pack: curated rows tokenized with a tokenizer file and packed into fixed-length training
sequences with their document boundaries (see docs/tokenize.md)."""
