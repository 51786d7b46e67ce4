"""Small HTTP servers of our own that behave like real OpenAI-compatible servers do."""
