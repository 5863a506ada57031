"""PII: spans of emails, IP addresses, phone numbers and keys/tokens per document, and the redacted text."""
