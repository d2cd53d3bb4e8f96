"""EngineConfig: defaults < YAML < KUBELLM_* env < CLI flags, and errors naming the field."""
import argparse
import subprocess
import sys

import pytest

from kubellm.runtime.cli.engine_args import add_engine_args, engine_config_from_args
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError


def parse(argv, env=None, monkeypatch=None):
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    args = parser.parse_args(argv)
    return engine_config_from_args(args)


def test_each_source_overrides_the_one_below(tmp_path, monkeypatch):
    cfg_file = tmp_path / "engine.yaml"
    cfg_file.write_text("max_num_seqs: 7\nblock_size: 32\ngpu_memory_utilization: 0.5\n")
    monkeypatch.setenv("KUBELLM_BLOCK_SIZE", "64")
    monkeypatch.setenv("KUBELLM_GPU_MEMORY_UTILIZATION", "0.6")
    cfg = parse(["--config", str(cfg_file), "--gpu-memory-utilization", "0.7"])
    assert cfg.max_num_seqs == 7                 # file beats default
    assert cfg.block_size == 64                  # env beats file
    assert cfg.gpu_memory_utilization == 0.7     # flag beats env
    assert cfg.scheduling_policy == "fcfs"       # default


def test_boolean_flags_and_env(monkeypatch):
    monkeypatch.setenv("KUBELLM_ENABLE_PREFIX_CACHING", "false")
    assert parse([]).enable_prefix_caching is False
    assert parse(["--enable-prefix-caching"]).enable_prefix_caching is True


@pytest.mark.parametrize("kwargs, field", [
    (dict(block_size=-16), "block_size"),
    (dict(block_size=24), "block_size"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=0.0), "gpu_memory_utilization"),
    (dict(scheduling_policy="lottery"), "scheduling_policy"),
    (dict(dtype="float8"), "dtype"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(num_kv_blocks=1), "num_kv_blocks"),
    (dict(distributed_executor_backend="ray"), "distributed_executor_backend"),
    (dict(distributed_executor_backend="uni", tensor_parallel_size=2),
     "distributed_executor_backend"),
])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        EngineConfig(**kwargs)
    assert err.value.field == field and field in str(err.value)


def test_executor_backend_follows_the_layout_unless_set():
    assert not EngineConfig().is_multi_process
    assert EngineConfig(pipeline_parallel_size=2).is_multi_process
    assert EngineConfig(distributed_executor_backend="mp").is_multi_process  # one rank
    assert EngineConfig.from_sources(env={"KUBELLM_DISTRIBUTED_EXECUTOR_BACKEND": "mp"}
                                     ).is_multi_process


def test_bad_env_value_names_variable_and_field(monkeypatch):
    monkeypatch.setenv("KUBELLM_MAX_NUM_SEQS", "lots")
    with pytest.raises(ConfigError, match="max_num_seqs.*KUBELLM_MAX_NUM_SEQS"):
        EngineConfig.from_sources()


def test_unknown_yaml_field_is_an_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("max_num_seqz: 3\n")
    with pytest.raises(ConfigError, match="max_num_seqz"):
        EngineConfig.from_sources(config_file=str(f))


def test_cli_exits_2_naming_the_field():
    proc = subprocess.run([sys.executable, "-m", "kubellm.runtime", "generate", "hi",
                           "--block-size", "-1"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "block_size" in proc.stderr


def test_unknown_model_id_offline_names_the_model(monkeypatch, tmp_path):
    from kubellm.runtime.assembly import resolve_model_dir
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="no-such-org/no-such-model"):
        resolve_model_dir(EngineConfig(model="no-such-org/no-such-model"))


@pytest.mark.parametrize("model_type, extra, expected", [
    ("mistral", {"sliding_window": 256}, 256),
    ("mistral", {"sliding_window": None}, 1024),
    ("qwen2", {"sliding_window": 256, "use_sliding_window": False}, 1024),
    ("qwen2", {"sliding_window": 256, "use_sliding_window": True}, 256),
])
def test_sliding_window_models_are_capped_at_their_window(model_type, extra, expected):
    """Full causal attention equals sliding-window attention only inside the window."""
    from types import SimpleNamespace

    from kubellm.runtime.assembly import resolve_max_model_len
    hf = SimpleNamespace(model_type=model_type, max_position_embeddings=1024, **extra)
    assert resolve_max_model_len(EngineConfig(), hf) == expected
    with pytest.raises(ConfigError, match="max_model_len"):
        resolve_max_model_len(EngineConfig(max_model_len=expected + 1), hf)
