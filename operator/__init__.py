"""kubellm.operator."""
