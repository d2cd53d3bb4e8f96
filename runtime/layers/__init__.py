"""Model building blocks; parallel linears and embeddings carry their own weight loaders."""
