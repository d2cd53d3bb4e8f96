"""Turns a SchedulerOutput into one forward pass and sampled tokens.

Builds the flat varlen inputs (token ids, positions, slot mapping, block tables,
sequence lengths) on the host with numpy, copies them to the device from pinned memory
without blocking, runs the model (a captured CUDA graph for decode-only steps on GPU),
takes the last hidden state of every request whose chunk reaches its end, and samples.
Owns the KV-cache tensors.
"""
from __future__ import annotations

import logging
import time
from itertools import compress
from operator import attrgetter

import numpy as np
import torch

from kubellm.runtime.attention import torch_backend
from kubellm.runtime.attention.metadata import AttentionMetadata, set_metadata
from kubellm.runtime.layers.attention import Attention
from kubellm.runtime.core.scheduler import SchedulerOutput
from kubellm.runtime.kernel_switches import KernelSwitches
from kubellm.runtime.worker.block_table_array import BlockTableArray
from kubellm.runtime.worker.decode_rows import DecodeRows, HostInputs
from kubellm.runtime.worker.prompt_logprobs import compute_prompt_logprobs

log = logging.getLogger(__name__)
_ALL_IDS, _REQUEST_ID = attrgetter("all_token_ids"), attrgetter("request_id")


def _use_tinygemm(model: torch.nn.Module) -> None:
    """The w4a16_tinygemm switch: each 4-bit linear that tinygemm takes gets its copy."""
    taken, kept = 0, {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is None or not hasattr(method, "add_tinygemm"):
            continue
        why = method.add_tinygemm(module)
        if why is None:
            taken += 1
        else:
            kept[why] = kept.get(why, 0) + 1
    log.info("w4a16_tinygemm: %d linears use tinygemm for decode%s", taken,
             "".join(f"; {n} kept the Triton kernel: {why}" for why, n in kept.items()))


def _use_fp8_quant_kernel(model: torch.nn.Module) -> None:
    """The fp8_quant_kernel switch: each FP8 linear quantizes its input in one kernel."""
    from kubellm.runtime.layers.quantization import fp8
    quantize, taken = fp8.fused_quantizer(), 0
    for module in model.modules():
        if isinstance(getattr(module, "quant_method", None), fp8.Fp8LinearMethod):
            module.fp8_quantize = quantize
            taken += 1
    log.info("fp8_quant_kernel: %d FP8 linears quantize their activations in one kernel",
             taken)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, sampler, device: torch.device,
                 dtype: torch.dtype, block_size: int, attention_backend: str = "torch",
                 switches: KernelSwitches | None = None,
                 kv_cache_dtype: torch.dtype | None = None):
        self.model = model
        self.sampler = sampler
        self.device = device
        self.dtype = dtype
        self.kv_dtype = kv_cache_dtype or dtype   # FP8 E4M3 with --kv-cache-dtype fp8
        self.block_size = block_size
        self.attn_layers = [m for m in model.modules() if isinstance(m, Attention)]
        self.backend_name = attention_backend
        self.backend = _load_backend(attention_backend)
        # one object for every layer: a benchmark flips a switch for the whole model
        self.switches = switches if switches is not None else KernelSwitches()
        for layer in self.attn_layers:
            layer.backend = self.backend
            layer.switches = self.switches
        if self.switches.w4a16_tinygemm and device.type == "cuda":
            _use_tinygemm(model)
        if self.switches.fp8_quant_kernel:   # used where torch._scaled_mm runs
            _use_fp8_quant_kernel(model)
        self.vocab_size = model.args.vocab_size
        self.graphs = None            # DecodeGraphs once captured (CUDA, triton backend)
        self.mixed_graphs = None      # MixedGraphs with the mixed_graphs switch
        self.host_time_s = 0.0        # input preparation, summed over steps
        self.num_steps = 0
        self.device_trace: list | None = None   # (start, end) CUDA events per step
        self._tables = BlockTableArray()   # the last step's block tables, kept
        self._rows = DecodeRows(block_size)  # the last step's sampling rows, kept
        self._staging = None
        if device.type == "cuda":
            from kubellm.runtime.worker.staging import PinnedStaging
            self._staging = PinnedStaging(device)

    # ---- KV cache ------------------------------------------------------------------
    def kv_bytes_per_block(self) -> int:
        layer = self.attn_layers[0]
        per_layer = 2 * self.block_size * layer.num_kv_heads * layer.head_dim
        return per_layer * len(self.attn_layers) * self.kv_dtype.itemsize

    def allocate_kv_cache(self, num_blocks: int) -> None:
        for layer in self.attn_layers:
            shape = (num_blocks, self.block_size, layer.num_kv_heads, layer.head_dim)
            layer.k_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
            layer.v_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)

    def capture_decode_graphs(self, max_num_seqs: int, max_model_len: int,
                              sizes: list[int] | None = None,
                              max_num_batched_tokens: int | None = None) -> None:
        """Decode graphs; with the mixed_graphs switch, graphs of mixed steps too."""
        from kubellm.runtime.worker.cuda_graphs import DecodeGraphs
        self.graphs = DecodeGraphs(self.model, self.device, max_num_seqs,
                                   -(-max_model_len // self.block_size), self.dtype,
                                   sizes=sizes)
        self.graphs.capture()
        if self.switches.mixed_graphs and max_num_batched_tokens:
            self.mixed_graphs = self.build_mixed_graphs(max_num_seqs, max_model_len,
                                                        max_num_batched_tokens)
            if self.mixed_graphs is not None:
                self.mixed_graphs.capture()

    def build_mixed_graphs(self, max_num_seqs: int, max_model_len: int,
                           max_num_batched_tokens: int):
        """MixedGraphs for this model (not captured yet): steps whose every chunk the
        paged kernel serves (mixed_graphs.py); None when the prefill kernel serves every
        chunk (a bound of 1 token), so no mixed step could replay them."""
        from kubellm.runtime.attention.triton_backend import PREFILL_KERNEL_MIN_QUERY
        from kubellm.runtime.worker.mixed_graphs import MixedGraphs, token_sizes
        sizes = token_sizes(max_num_batched_tokens)
        max_query = PREFILL_KERNEL_MIN_QUERY - 1 if self.switches.prefill_attention \
            else sizes[-1]
        if max_query < 1:
            return None
        return MixedGraphs(self.model, self.device, max_num_seqs,
                           -(-max_model_len // self.block_size), self.dtype, sizes,
                           max_query)

    def shutdown(self) -> None:
        """Free the weights, the KV cache and the CUDA graphs now, even while something
        still holds this runner (an engine kept after its shutdown, a traceback)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # nothing queued still reads them
        for layer in self.attn_layers:
            layer.k_cache = layer.v_cache = None
        self.attn_layers = []
        self.graphs = self.mixed_graphs = self.model = self._staging = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- one step ------------------------------------------------------------------
    def execute(self, out: SchedulerOutput, block_tables: list[list[int]]):
        """Returns (sampled token per sampling request id, logprobs per request id,
        prompt logprobs per request id that asked)."""
        return self.launch(out, block_tables).result()

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, block_tables: list[list[int]],
               ahead_of: "StepHandle | None" = None) -> "StepHandle":
        """Queue the step on the device and return at once (on CUDA). A row whose input
        token is still being sampled by ``ahead_of`` (the step before, not yet back on the
        host) reads it from that step's device tensor."""
        start = time.perf_counter()
        token_ids, positions, meta, sample_rows, requests = self.prepare_inputs(
            out, block_tables, ahead_of)
        self.host_time_s += time.perf_counter() - start
        self.num_steps += 1
        began = self._mark()
        hidden = self.forward(token_ids, positions, meta)
        handle = StepHandle([], None)
        if requests:
            # in the model's dtype: the sampler's all-greedy argmax reads them as they are,
            # every other path takes its own fp32 copy (Sampler.sample)
            logits = self.model.compute_logits(hidden[sample_rows])
            # the very list of the step before (steady decode): the same rows, so the
            # same row index per request id (no dict built again)
            steady = ahead_of is not None and requests is ahead_of.requests
            states = ahead_of.states if steady and ahead_of.states is not None \
                else [r.sampling_state for r in requests]
            handle = StepHandle(requests, self.sampler.sample(
                logits, states, constrained=out.has_special),
                ahead_of.row_of if steady else None, states)
        self._rows.step = handle   # the next step may derive its inputs from this one
        if out.has_special:   # only while a request that asks for them is alive
            handle.prompt_logprobs = compute_prompt_logprobs(self.model, hidden, out.scheduled)
        if began is not None:
            self.device_trace.append((began, self._mark()))
        return handle

    def trace_device(self, enabled: bool = True) -> None:
        """Record when each step starts and ends on the device (CUDA events), so that a
        benchmark can tell how long the device sat idle between steps waiting for the
        host. Off by default: events cost a little host time."""
        self.device_trace = [] if enabled and self.device.type == "cuda" else None

    def _mark(self):
        if self.device_trace is None:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def forward(self, token_ids, positions, meta: AttentionMetadata) -> torch.Tensor:
        return self.forward_stage(token_ids, positions, meta)[0]

    def forward_stage(self, token_ids, positions, meta: AttentionMetadata, hidden=None,
                      residual=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model (or this rank's pipeline stage of it): a CUDA graph's replay for a
        decode step that fits one, else eager. A later stage starts from ``hidden`` and
        ``residual``; the last stage gives no residual out (None)."""
        if self.graphs is not None and meta.is_decode_only and self.graphs.fits(meta):
            return self.graphs.replay(token_ids, positions, meta, hidden, residual)
        if self.mixed_graphs is not None and self.mixed_graphs.fits(meta):
            return self.mixed_graphs.replay(token_ids, positions, meta, hidden, residual)
        set_metadata(meta)
        try:
            hidden, residual = self.model(token_ids, positions, hidden, residual)
        finally:
            set_metadata(None)
        return hidden, None if self.model.is_last_stage else residual

    def prepare_inputs(self, out: SchedulerOutput, block_tables: list[list[int]],
                       ahead_of: "StepHandle | None" = None):
        inputs = self._rows.derive(out, block_tables, ahead_of, self._tables)
        if inputs is None:
            inputs = self.host_inputs(out, block_tables, ahead_of)
        self._rows.remember(inputs)
        return self._to_device(inputs, ahead_of)

    def host_inputs(self, out: SchedulerOutput, block_tables: list[list[int]],
                    ahead_of: "StepHandle | None" = None) -> HostInputs:
        """The general path: every field of every row from the requests."""
        requests_all = out.requests
        num_seqs = len(requests_all)
        # per-row fields from the output's lists, through C-level maps (len) and numpy
        # masks: no Python frame per row (a generator or comprehension costs ~3x)
        query_lens = np.array(out.num_new_tokens, np.int64)
        starts = np.array(out.starts, np.int64)
        cu = np.zeros(num_seqs + 1, np.int32)
        np.cumsum(query_lens, out=cu[1:])
        num_tokens = int(cu[-1])
        seq_lens = (starts + query_lens).astype(np.int32)
        # rows whose token the previous step is still sampling (a decode from one past the
        # known tokens): their first token is filled in on the device from that step's
        # sample row; 0 here
        late_sources = []
        if ahead_of is not None:
            known = np.fromiter(map(len, map(_ALL_IDS, requests_all)), np.int64, num_seqs)
            late = starts == known
            if late.any():
                late_sources = list(map(ahead_of.row_of.__getitem__,
                                        compress(map(_REQUEST_ID, requests_all),
                                                 late.tolist())))
        else:   # (pipeline ranks: their token lists have no len, and nothing is late)
            late = np.zeros(num_seqs, bool)
        late_rows = cu[:-1][late]
        if num_tokens == num_seqs:          # decode-only: no per-token Python loops
            token_ids = np.zeros(num_seqs, np.int64)
            on_time = np.flatnonzero(~late).tolist()
            if on_time:
                token_ids[on_time] = [requests_all[i].all_token_ids[out.starts[i]]
                                      for i in on_time]
            positions = starts
        else:
            token_ids = np.fromiter(
                (t for r, start, n in zip(requests_all, out.starts, out.num_new_tokens)
                 for t in (r.all_token_ids[start:start + n]
                           or (0,))),    # a late token: filled in on the device
                np.int64, num_tokens)
            positions = np.concatenate([np.arange(a, a + n) for a, n in zip(starts, query_lens)])
        table = self._tables.build(block_tables)
        seq_index = np.repeat(np.arange(num_seqs), query_lens)
        bs = self.block_size
        slots = table[seq_index, positions // bs].astype(np.int64) * bs + positions % bs
        samples = np.array(out.samples, bool)
        return HostInputs(
            token_ids=token_ids, positions=positions, slots=slots,
            sample_rows=(cu[1:][samples] - 1).astype(np.int64),
            late_rows=late_rows.astype(np.int64),
            late_sources=np.asarray(late_sources, np.int64), table=table,
            seq_lens=seq_lens, cu=cu, query_lens=query_lens.tolist(),
            requests=list(compress(requests_all, samples.tolist())),
            sample_seqs=np.flatnonzero(samples))

    def _to_device(self, inputs: HostInputs, ahead_of: "StepHandle | None"):
        query_lens = inputs.query_lens
        num_seqs = len(query_lens)
        max_q = max(query_lens, default=0)
        # the scheduler puts decodes first: how many lead the step
        num_decodes = int(np.argmax(np.asarray(query_lens) != 1)) if max_q > 1 else num_seqs
        # every token late (steady decode): the step before's samples are the input ids
        all_late = inputs.late_in_order or len(inputs.late_rows) == len(inputs.token_ids) > 0
        int64 = [inputs.positions, inputs.slots, inputs.sample_rows]
        if not all_late:
            int64 += [inputs.token_ids, inputs.late_rows, inputs.late_sources]
        elif not inputs.late_in_order:
            int64.append(inputs.late_sources)
        # one upload per step: a second would take the next pinned buffer, whose last
        # copy may still wait behind the running step
        uploaded = self._upload(int64 + [inputs.table, inputs.seq_lens, inputs.cu])
        positions_t, slots_t, rows_t = uploaded[:3]
        table_t, seq_lens_t, cu_t = uploaded[-3:]
        sampled = ahead_of.batch.token_ids if ahead_of is not None and \
            ahead_of.batch is not None else None
        if all_late:
            token_ids_t = sampled if inputs.late_in_order else sampled[uploaded[3]]
        else:
            token_ids_t, late_t, sources_t = uploaded[3:6]
            if len(inputs.late_rows):
                token_ids_t.index_copy_(0, late_t, sampled.index_select(0, sources_t))
        meta = AttentionMetadata(
            slot_mapping=slots_t, block_tables=table_t, seq_lens=seq_lens_t, cu_seqlens_q=cu_t,
            max_seqlen_q=max_q,
            seq_lens_cpu=inputs.seq_lens.tolist(), query_lens_cpu=query_lens,
            is_decode_only=max_q == 1, num_decodes=num_decodes)
        return token_ids_t, positions_t, meta, rows_t, inputs.requests

    def _upload(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        """Arrays -> device tensors of their dtypes and shapes: one pinned buffer and
        one non-blocking copy on CUDA (each separate copy costs tens of us of host
        time), the arrays themselves on CPU."""
        if self._staging is None:   # copies: the block table array is reused next step
            return [torch.from_numpy(np.array(a, copy=True, order="C")) for a in arrays]
        return self._staging.upload(arrays)


class StepHandle:
    """A launched step: which requests sample and their (maybe still running) samples."""
    __slots__ = ("requests", "batch", "row_of", "prompt_logprobs", "states")

    def __init__(self, requests: list, batch, row_of: dict[str, int] | None = None,
                 states: list | None = None):
        self.requests = requests
        self.batch = batch
        self.states = states              # the sampling states, in the requests' order
        self.row_of = {r.request_id: i for i, r in enumerate(requests)} \
            if row_of is None else row_of
        self.prompt_logprobs = None       # PromptLogprobs when a request asked

    def result(self) -> tuple[dict[str, int], dict[str, dict | None], dict]:
        """Wait for the samples: (token per request id, logprobs per request id, prompt
        logprobs per request id that asked: (first position, entries))."""
        prompt = self.prompt_logprobs.result() if self.prompt_logprobs is not None else {}
        if self.batch is None:
            return {}, {}, prompt
        result = self.batch.result()
        ids = dict(zip(self.row_of, result.token_ids))
        logprobs = dict(zip(self.row_of, result.logprobs))
        return ids, logprobs, prompt


def _load_backend(name: str):
    if name == "torch":
        return torch_backend
    if name == "triton":
        from kubellm.runtime.attention import triton_backend
        return triton_backend
    raise ValueError(f"unknown attention backend {name!r}")
