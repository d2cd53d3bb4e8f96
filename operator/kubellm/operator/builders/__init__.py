"""Pure functions: a defaulted LLMDeployment spec -> Kubernetes manifests (dicts)."""
