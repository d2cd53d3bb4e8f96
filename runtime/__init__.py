"""kubellm.runtime."""
