"""The reference for loadtests/sse_fanout.py: the same SSE fan-out built on Django Channels
with channels_redis, as a team would without the event bus. Benchmark-only, not product."""
