"""Tensor and pipeline parallel state and communication (torch.distributed)."""
