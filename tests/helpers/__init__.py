"""Shared test helpers (pool builders, the fake aiter on sys.path, references)."""
