"""Benchmarks behind ``kubellm bench``: offline throughput and online serving."""
