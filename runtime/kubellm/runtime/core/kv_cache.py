"""KV-cache block manager: a pool of fixed-size blocks, ref-counted, with per-request
block tables and automatic prefix caching.

A block holding ``block_size`` tokens that are all known gets a hash chained from its
predecessor's (so a hash names the whole prefix up to and including the block). Freed
blocks keep their hash and stay findable until the pool needs them again, oldest first
(LRU). The scheduler sees only block ids; ``allocate`` returning ``None`` means "not
enough free blocks: preempt something".
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

NO_HASH = None


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = NO_HASH


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._blocks = [Block(i) for i in range(num_blocks)]
        # ref_count == 0 blocks in eviction order: the first key is reused first
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}          # block hash -> block id
        self._tables: dict[str, list[int]] = {}    # request id -> block ids
        self._hashes: dict[str, list[int]] = {}    # request id -> hashes of its full blocks
        self.prefix_queries = 0                    # prompt tokens looked up
        self.prefix_hits = 0                       # prompt tokens found cached

    # ---- queries -------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def block_table(self, request_id: str) -> list[int]:
        return self._tables.get(request_id, [])

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def num_noop_tokens(self, request_id: str) -> int:
        """The largest ``num_tokens`` for which ``allocate`` (no cached blocks) would
        change nothing: the table's capacity, and with prefix caching one token short of
        the next block to hash. The scheduler skips its call per decode step below it
        (a block fills only every block_size tokens)."""
        table = self._tables.get(request_id)
        if table is None:
            return 0
        capacity = len(table) * self.block_size
        if not self.enable_prefix_caching:
            return capacity
        next_hash = (len(self._hashes.get(request_id, ())) + 1) * self.block_size
        return min(capacity, next_hash - 1)

    # ---- prefix caching ------------------------------------------------------------
    def find_cached_prefix(self, request_id: str, token_ids: list[int]) -> list[int]:
        """Block ids holding the longest cached prefix of ``token_ids`` (full blocks only,
        leaving at least one token to compute so that the step yields logits)."""
        if not self.enable_prefix_caching:
            return []
        hashes = self._full_block_hashes(token_ids, (len(token_ids) - 1) // self.block_size)
        hits = []
        for h in hashes:
            block_id = self._cached.get(h)
            if block_id is None:
                break
            hits.append(block_id)
        self.prefix_queries += len(token_ids)
        self.prefix_hits += len(hits) * self.block_size
        return hits

    def tokens_to_compute(self, token_ids: list[int], seen: set) -> int:
        """How many of a new prompt's tokens a step would compute: all but its leading
        full blocks that are cached already or that a prompt before it in ``seen`` (block
        hashes, which this adds the prompt's to) will compute. Changes nothing else: the
        engine core sizes an idle burst with it (core_proc.py)."""
        if not self.enable_prefix_caching:
            return len(token_ids)
        hashes = self._full_block_hashes(token_ids, (len(token_ids) - 1) // self.block_size)
        shared = 0
        for h in hashes:
            if h not in self._cached and h not in seen:
                break
            shared += 1
        seen.update(hashes)
        return len(token_ids) - shared * self.block_size

    def _full_block_hashes(self, token_ids: list[int], num_full: int,
                           known: list[int] | None = None) -> list[int]:
        hashes = list(known or [])
        parent = hashes[-1] if hashes else 0
        bs = self.block_size
        for i in range(len(hashes), num_full):
            parent = hash((parent, tuple(token_ids[i * bs:(i + 1) * bs])))
            hashes.append(parent)
        return hashes

    # ---- allocation ----------------------------------------------------------------
    def can_allocate(self, request_id: str, num_tokens: int, cached: list[int] = ()) -> bool:
        return self._num_needed(request_id, num_tokens, cached) <= self._num_available(cached)

    def allocate(self, request_id: str, token_ids: list[int], num_tokens: int,
                 cached: list[int] = ()) -> list[int] | None:
        """Make the request's table cover ``num_tokens`` tokens (its first ``len(cached)``
        blocks taken from the prefix cache). Returns the new block ids, or None (and
        changes nothing) when the pool is short."""
        table = self._tables.get(request_id)
        if not cached and table is not None:
            # the hot paths of decode: the last block still has room, or the table grows
            # by a block (every block_size steps per request; no cached blocks to count)
            new = []
            num_needed = -(-num_tokens // self.block_size) - len(table)
            if num_needed > 0:
                if num_needed > len(self._free):
                    return None
                new = [self._pop_free() for _ in range(num_needed)]
                table += new
            # (a block's last token may still be in flight: then it is hashed next time)
            num_known = min(num_tokens, len(token_ids))
            if self.enable_prefix_caching and \
                    num_known // self.block_size > len(self._hashes.get(request_id, ())):
                self._cache_full_blocks(request_id, token_ids, num_known)
            return new
        if not self.can_allocate(request_id, num_tokens, cached):
            return None
        table = self._tables.setdefault(request_id, [])
        for block_id in cached:
            self._take(block_id)
            table.append(block_id)
        new = []
        for _ in range(self._num_needed(request_id, num_tokens, ())):
            block_id = self._pop_free()
            new.append(block_id)
            table.append(block_id)
        if cached:
            self._hashes[request_id] = self._full_block_hashes(token_ids, len(cached))
        self._cache_full_blocks(request_id, token_ids, min(num_tokens, len(token_ids)))
        return new

    def free(self, request_id: str) -> None:
        """Return a request's blocks; the last blocks of its table are reused first, the
        shared prefix last (it is the most likely to be hit again)."""
        table = self._tables.pop(request_id, [])
        self._hashes.pop(request_id, None)
        for block_id in reversed(table):
            block = self._blocks[block_id]
            block.ref_count -= 1
            if block.ref_count < 0:
                raise RuntimeError(f"block {block_id} ref count went negative")
            if block.ref_count == 0:
                self._free[block_id] = None
                if block.block_hash is NO_HASH:
                    self._free.move_to_end(block_id, last=False)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (vLLM's reset_prefix_cache). Only while no request
        holds blocks, as vLLM does: a running request's table stays as it is and the
        call returns False having changed nothing."""
        if self._tables:
            return False
        for block in self._blocks:
            block.block_hash = NO_HASH
        self._cached.clear()
        return True

    # ---- private -------------------------------------------------------------------
    def _num_needed(self, request_id, num_tokens, cached) -> int:
        have = len(self._tables.get(request_id, ())) + len(cached)
        return max(0, -(-num_tokens // self.block_size) - have)

    def _num_available(self, cached) -> int:
        # cached blocks with ref 0 sit in the free queue; taking them uses that capacity
        return len(self._free) - sum(1 for b in cached if self._blocks[b].ref_count == 0)

    def _take(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if block.ref_count == 0:
            del self._free[block_id]
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self._free.popitem(last=False)
        block = self._blocks[block_id]
        self._drop_hash(block)
        block.ref_count = 1
        return block_id

    def _drop_hash(self, block: Block) -> None:
        if block.block_hash is not NO_HASH:
            if self._cached.get(block.block_hash) == block.block_id:
                del self._cached[block.block_hash]
            block.block_hash = NO_HASH

    def _cache_full_blocks(self, request_id: str, token_ids: list[int], num_tokens: int):
        if not self.enable_prefix_caching:
            return
        known = self._hashes.get(request_id, [])
        num_full = num_tokens // self.block_size
        if num_full <= len(known):
            return
        hashes = self._full_block_hashes(token_ids, num_full, known)
        table = self._tables[request_id]
        for i in range(len(known), num_full):
            block = self._blocks[table[i]]
            if block.block_hash is NO_HASH and hashes[i] not in self._cached:
                block.block_hash = hashes[i]
                self._cached[hashes[i]] = block.block_id
        self._hashes[request_id] = hashes
