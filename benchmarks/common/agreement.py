"""The top-N agreement rule for bf16 comparisons (exact equality is too strict there):
up to the first divergence, each side's generated token lies within the other side's
top-N. Shared by the GPU correctness test (ours against transformers) and the
multi-GPU benchmark (TP/PP against TP=1)."""
from __future__ import annotations

from collections.abc import Container, Sequence

import torch


def first_disagreement(tokens_a: Sequence[int], top_a: Sequence[Container[int]],
                       tokens_b: Sequence[int], top_b: Sequence[Container[int]],
                       names: tuple[str, str] = ("a", "b")) -> str | None:
    """None when the rule holds; else which step broke it and how. ``top_x[t]`` holds
    side x's top-N token ids at step t (a set, a list, or a {token: logprob} dict)."""
    name_a, name_b = names
    for t, (a, b) in enumerate(zip(tokens_a, tokens_b)):
        if a not in top_b[t]:
            return f"step {t}: {name_a}'s token {a} not in {name_b}'s top-N {sorted(top_b[t])}"
        if b not in top_a[t]:
            return f"step {t}: {name_b}'s token {b} not in {name_a}'s top-N {sorted(top_a[t])}"
        if a != b:
            return None     # first divergence, both within the other's top-N: stop here
    return None


def teacher_forced_gaps(reference, prompt: Sequence[int], tokens: Sequence[int],
                        device) -> torch.Tensor:
    """How far below the reference's best logit each of ``tokens`` sits, in standard
    deviations of that position's logits, when ``reference`` (a transformers model) reads
    the prompt and the tokens in one pass: 0 where it agrees. Unlike the top-N rule it
    checks every position, not only those before the first divergence. Noise of equal
    weights summed in another order stays a fraction of a std on random models; a token
    from a wrong model sits where a random token does, ~4-5 std below the best."""
    ids = torch.tensor([list(prompt) + list(tokens)], device=device)
    with torch.no_grad():
        logits = reference(ids).logits[0].float()
    rows = logits[len(prompt) - 1:-1]                  # the positions that chose tokens
    picked = rows.gather(1, torch.tensor(list(tokens), device=device)[:, None])[:, 0]
    return (rows.max(dim=1).values - picked) / rows.std(dim=1)
