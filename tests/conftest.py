"""Shared pytest configuration: deterministic hypothesis runs (fixed seed, no example database)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "attnlearn",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("attnlearn")
