"""The flags the operator writes into pods, read by the runtime's own parsers."""
from __future__ import annotations

import pytest
import yaml

from kubellm.operator.builders.pod import serve_args
from kubellm.operator.validation import defaulted_spec
from kubellm.runtime.cli.main import build_parser
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.lifecycle import EXIT_AFTER_DRAIN_S
from tests.operator.test_operator_builders import HF, TOPOLOGIES, all_pod_specs, children
from tests.paths import ROOT


def test_the_runtime_cli_accepts_every_flag_the_operator_writes():
    """The pod's args parse with the real `kubellm serve` parser: an interface check."""
    spec = defaulted_spec({"model": {**HF, "name": "chat", "dtype": "bfloat16",
                                     "maxModelLen": 4096, "quantization": "gptq"},
                           "parallelism": {"tensor": 2, "pipeline": 2},
                           "engine": {"gpuMemoryUtilization": 0.8, "maxNumSeqs": 8,
                                      "maxNumBatchedTokens": 1024, "blockSize": 16,
                                      "enablePrefixCaching": False,
                                      "schedulingPolicy": "timeslice", "enforceEager": True,
                                      "seed": 3, "maxQueue": 10}})
    args = build_parser().parse_args(serve_args(spec, "m"))
    assert (args.model, args.served_model_name, args.port) == ("org/model", "chat", 8000)
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (2, 2)
    assert args.enable_prefix_caching is False and args.enforce_eager is True
    assert (args.max_queue, args.shutdown_timeout, args.max_model_len) == (10, 30, 4096)
    assert args.quantization == "gptq"


@pytest.mark.parametrize("topology_name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("engine", [{}, {"shutdownTimeoutSeconds": 0},
                                    {"shutdownTimeoutSeconds": 120}])
def test_grace_period_outlasts_prestop_and_the_servers_drain(topology_name, engine):
    """The kubelet kills at terminationGracePeriodSeconds counted from preStop's start:
    it must cover the preStop sleep, then --shutdown-timeout of draining, then the most
    the runtime takes to end cut requests and stop its processes (EXIT_AFTER_DRAIN_S:
    the front ends' last bytes, then the engine core). The drain time follows
    spec.engine.shutdownTimeoutSeconds."""
    parallelism, lws = TOPOLOGIES[topology_name]
    built = children({"model": HF, "parallelism": parallelism, "engine": engine}, lws=lws)
    drain = engine.get("shutdownTimeoutSeconds", ServerConfig().shutdown_timeout)
    for pod in all_pod_specs(built):
        c = pod["containers"][0]
        assert float(c["args"][c["args"].index("--shutdown-timeout") + 1]) == drain
        sleep = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
        assert pod["terminationGracePeriodSeconds"] >= sleep + drain + EXIT_AFTER_DRAIN_S


def test_moe_example_asks_the_runtime_for_expert_parallelism():
    """examples/moe-qwen3-30b-a3b.yaml passes --enable-expert-parallel through extraArgs;
    the runtime's own resolution turns it into EngineConfig.enable_expert_parallel."""
    from kubellm.runtime.cli.engine_args import engine_config_from_args
    example = yaml.safe_load((ROOT / "examples" / "moe-qwen3-30b-a3b.yaml").read_text())
    args = build_parser().parse_args(serve_args(defaulted_spec(example["spec"]), "qwen3-moe"))
    config = engine_config_from_args(args)
    assert config.enable_expert_parallel is True and config.tensor_parallel_size == 2
    assert config.model == "Qwen/Qwen3-30B-A3B"


def test_the_crds_quantization_and_kv_cache_choices_are_the_runtimes():
    """The operator cannot import the runtime (import-linter), so its CRD repeats the
    runtime's choices: they must stay the same list, and the pod's flags must parse."""
    from kubellm.operator.schema import ENGINE, MODEL
    from kubellm.runtime.config import KV_CACHE_DTYPES, QUANTIZATION_METHODS
    assert MODEL["properties"]["quantization"]["enum"] == list(QUANTIZATION_METHODS)
    assert ENGINE["properties"]["kvCacheDtype"]["enum"] == list(KV_CACHE_DTYPES)
    for dtype in KV_CACHE_DTYPES:
        spec = defaulted_spec({"model": HF, "engine": {"kvCacheDtype": dtype}})
        assert build_parser().parse_args(serve_args(spec, "m")).kv_cache_dtype == dtype
