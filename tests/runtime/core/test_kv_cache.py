"""Block accounting of the KV-cache manager: ref counts, prefix hits, LRU reuse."""
import pytest

from kubellm.runtime.core.kv_cache import KVCacheManager

BS = 4


def tokens(n, start=0):
    return list(range(start, start + n))


def test_allocate_covers_tokens_and_free_returns_everything():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    new = kv.allocate("a", tokens(10), 10)
    assert len(new) == 3 and kv.block_table("a") == new
    assert kv.num_free_blocks == 5
    # growing by one token inside the last block needs no new block; crossing it does
    assert kv.allocate("a", tokens(12), 12) == []
    assert len(kv.allocate("a", tokens(13), 13)) == 1
    kv.free("a")
    assert kv.num_free_blocks == 8
    assert all(kv.ref_count(b) == 0 for b in range(8))


def test_allocate_returns_none_and_changes_nothing_when_short():
    kv = KVCacheManager(num_blocks=3, block_size=BS)
    kv.allocate("a", tokens(8), 8)
    before = (kv.num_free_blocks, kv.block_table("a"))
    assert kv.allocate("b", tokens(9, 100), 9) is None
    assert (kv.num_free_blocks, kv.block_table("a")) == before
    assert kv.block_table("b") == []


def test_prefix_hits_share_blocks_and_count_tokens():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    prompt = tokens(10)
    kv.allocate("a", prompt, 10)
    hits = kv.find_cached_prefix("b", prompt[:8] + [99, 98])
    assert hits == kv.block_table("a")[:2]
    assert kv.prefix_hits == 8 and kv.prefix_queries == 10
    kv.allocate("b", prompt[:8] + [99, 98], 10, cached=hits)
    assert [kv.ref_count(b) for b in hits] == [2, 2]
    kv.free("a")
    assert [kv.ref_count(b) for b in hits] == [1, 1]
    kv.free("b")
    assert kv.num_free_blocks == 16


def test_a_fully_cached_prompt_still_leaves_a_token_to_compute():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    kv.allocate("a", tokens(8), 8)
    kv.free("a")
    assert len(kv.find_cached_prefix("b", tokens(8))) == 1   # not 2: logits need a token


def test_freed_cached_blocks_are_reusable_until_evicted_lru():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    kv.allocate("a", tokens(8), 8)
    kv.free("a")
    assert len(kv.find_cached_prefix("x", tokens(8) + [1])) == 2
    kv.allocate("b", tokens(12, 500), 12)       # takes 3 of 4 blocks: evicts 'a's tail first
    assert len(kv.find_cached_prefix("y", tokens(8) + [1])) == 1
    kv.free("b")


def test_prefix_caching_off_never_hits():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_prefix_caching=False)
    kv.allocate("a", tokens(8), 8)
    kv.free("a")
    assert kv.find_cached_prefix("b", tokens(9)) == []
    assert kv.prefix_hits == 0


def test_double_free_is_harmless_and_refcounts_never_go_negative():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    kv.allocate("a", tokens(4), 4)
    kv.free("a")
    kv.free("a")
    assert all(kv.ref_count(b) == 0 for b in range(4))
    assert kv.num_free_blocks == 4


def test_usage_fraction():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    kv.allocate("a", tokens(8), 8)
    assert kv.usage == pytest.approx(0.5)


@pytest.mark.parametrize("caching", [True, False])
def test_allocate_changes_nothing_up_to_num_noop_tokens(caching):
    """The scheduler skips allocate below num_noop_tokens: there it must be a no-op (no
    block, no hash), and just above it it must do something (else the skip is idle)."""
    import copy
    import random
    rng = random.Random(0)
    kv = KVCacheManager(num_blocks=64, block_size=BS, enable_prefix_caching=caching)
    known = tokens(3)
    computed = 0
    assert kv.num_noop_tokens("a") == 0
    for _ in range(60):
        num_tokens = computed + rng.choice([1, 1, 1, 2, 5])
        if rng.random() < 0.7:
            known = known + [rng.randrange(50)]    # the step's sample landed (or not)
        assert kv.allocate("a", known, num_tokens) is not None
        computed = num_tokens
        # below ``computed`` when a full block's tokens are not all known yet (its hash
        # waits for them): the next step calls allocate again
        limit = kv.num_noop_tokens("a")
        state = copy.deepcopy((kv._tables, kv._hashes, kv._cached, list(kv._free)))
        # whatever tokens are known by then (a prompt is known far ahead of the chunks)
        ahead = known + tokens(2 * BS, 500)
        for n in range(computed, limit + 1):
            assert kv.allocate("a", ahead, n) == []
        assert copy.deepcopy((kv._tables, kv._hashes, kv._cached, list(kv._free))) == state
        if len(known) > limit:   # a block to hash, or one to add, just above the limit
            kv.allocate("a", known, limit + 1)
            assert (kv._tables, kv._hashes) != state[:2]
            computed = limit + 1
    kv.free("a")
    assert kv.num_noop_tokens("a") == 0


def test_a_growing_table_takes_blocks_in_place_and_hashes_once_tokens_are_known():
    """allocate's decode path (the request has a table, nothing cached): the same list
    grows (the runner's block table array keys rows on it), several blocks at once if a
    chunk needs them, nothing changes when the pool is short, and a full block is hashed
    only once its last token is known (async scheduling: it may still be in flight)."""
    kv = KVCacheManager(num_blocks=6, block_size=BS)
    kv.allocate("a", tokens(3), 3)
    table = kv.block_table("a")
    new = kv.allocate("a", tokens(11), 12)          # 12th token still in flight
    assert len(new) == 2 and kv.block_table("a") is table and table[1:] == new
    assert kv.find_cached_prefix("b", tokens(13)) == table[:2]   # block 3 not hashed
    assert kv.allocate("a", tokens(12), 13) == [table[3]]
    assert kv.find_cached_prefix("b", tokens(13)) == table[:3]   # now it is
    free = kv.num_free_blocks
    assert kv.allocate("a", tokens(13), 13 + BS * (free + 1)) is None
    assert kv.block_table("a") is table and len(table) == 4 and kv.num_free_blocks == free
    kv.free("a")
    assert kv.num_free_blocks == 6 and all(kv.ref_count(b) == 0 for b in range(6))


def test_tokens_to_compute_counts_blocks_cached_or_shared_within_a_burst_once():
    """What an idle core's burst gather counts against a step's budget: a prompt minus
    its leading full blocks already cached or held by an earlier prompt of the burst;
    the pool and the hit counters stay untouched."""
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    kv.allocate("a", tokens(9), 9)                    # two full blocks cached
    free_before, queries_before = kv.num_free_blocks, kv.prefix_queries
    seen = set()
    assert kv.tokens_to_compute(tokens(12), seen) == 12 - 2 * BS   # its first 8 cached
    assert kv.tokens_to_compute(tokens(12, 100), seen) == 12       # nothing in common
    # the second prompt's first two blocks will be computed by the burst already
    assert kv.tokens_to_compute(tokens(8, 100) + [7, 7, 7, 7, 7], seen) == 13 - 2 * BS
    assert kv.tokens_to_compute(tokens(8), seen) == 8 - BS   # a last token stays to compute
    assert (kv.num_free_blocks, kv.prefix_queries) == (free_before, queries_before)
    assert KVCacheManager(num_blocks=4, block_size=BS, enable_prefix_caching=False) \
        .tokens_to_compute(tokens(12), set()) == 12


def test_reset_prefix_cache_forgets_prefixes_only_when_no_request_holds_blocks():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    prompt = tokens(10)
    kv.allocate("a", prompt, 10)
    assert kv.reset_prefix_cache() is False            # "a" still holds its blocks
    assert kv.find_cached_prefix("b", prompt) == kv.block_table("a")[:2]
    kv.free("a")
    assert kv.find_cached_prefix("b", prompt)          # freed blocks stay findable ...
    assert kv.reset_prefix_cache() is True
    assert kv.find_cached_prefix("b", prompt) == []    # ... until the reset
    assert kv.num_free_blocks == 16
    kv.allocate("c", prompt, 10)                       # and the cache fills again
    assert kv.find_cached_prefix("d", prompt) == kv.block_table("c")[:2]
