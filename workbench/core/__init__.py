"""Layer 1: configuration, hashing, caches, atomic writes, seeding, progress, logging, tracking, errors.

Nothing in this layer imports an ML library.
"""
