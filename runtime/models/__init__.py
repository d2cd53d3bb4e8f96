"""Model families, looked up by the checkpoint's ``architectures`` / ``model_type``."""
