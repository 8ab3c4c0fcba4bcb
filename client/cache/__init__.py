"""The client cache of one prefix (docs/cache.md): the sans-IO core, what both caches share, the
blocking (sync.py) and asyncio (aio.py) caches and the cache() operation.
"""
