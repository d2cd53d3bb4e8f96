"""kubellm.kernels."""
