"""Model families, looked up by the checkpoint's ``architectures`` / ``model_type``.

May import: ``layers`` and torch. A model file knows nothing of parallelism or
quantization beyond the layers it builds from.
"""
