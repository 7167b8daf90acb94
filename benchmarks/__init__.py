"""Scripts that print performance figures (ratios measured in one process); not part of the test suite."""
