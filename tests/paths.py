"""The repository root, for tests that read its files (examples, charts, benchmarks)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
