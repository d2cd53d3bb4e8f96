"""`kubellm serve` options: every engine and server field as flag, KUBELLM_* env and
--config YAML key, with the shared precedence and errors that name the field."""
from __future__ import annotations

import pytest

from kubellm.runtime.cli.main import build_parser
from kubellm.runtime.cli.serve import resolve_configs


def parse(*argv):
    return build_parser().parse_args(["serve", *argv])


def test_defaults_without_model():
    engine, server = resolve_configs(parse())
    assert engine.model is None  # the embedded default model
    assert (server.host, server.port, server.api_key) == ("0.0.0.0", 8000, None)
    assert server.shutdown_timeout == 30.0 and server.max_queue == 1024
    assert (server.api_server_count, server.max_request_body_bytes,
            server.tokenizer_pool_size) == (1, 8 * 2**20, 2)


def test_precedence_yaml_env_flags(tmp_path, monkeypatch):
    config = tmp_path / "serve.yaml"
    config.write_text("port: 9000\nmax_queue: 5\nmax_num_seqs: 7\nserved_model_name: a\n")
    monkeypatch.setenv("KUBELLM_MAX_QUEUE", "6")
    monkeypatch.setenv("KUBELLM_API_KEY", "from-env")
    engine, server = resolve_configs(parse("some/dir", "--config", str(config),
                                           "--served-model-name", "b",
                                           "--shutdown-timeout", "2.5"))
    assert engine.model == "some/dir" and engine.max_num_seqs == 7
    assert server.port == 9000          # YAML over default
    assert server.max_queue == 6        # env over YAML
    assert server.served_model_name == "b"  # flag over YAML
    assert server.api_key == "from-env" and server.shutdown_timeout == 2.5


@pytest.mark.parametrize("argv,env,field", [
    (["--port", "70000"], {}, "port"),
    (["--max-queue", "0"], {}, "max_queue"),
    ([], {"KUBELLM_SHUTDOWN_TIMEOUT": "soon"}, "shutdown_timeout"),
    ([], {"KUBELLM_UVICORN_LOG_LEVEL": "loud"}, "uvicorn_log_level"),
    (["--api-server-count", "0"], {}, "api_server_count"),
    (["--max-request-body-bytes", "-1"], {}, "max_request_body_bytes"),
    ([], {"KUBELLM_TOKENIZER_POOL_SIZE": "0"}, "tokenizer_pool_size"),
])
def test_bad_values_name_the_field(argv, env, field, monkeypatch, capsys):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exc:
        resolve_configs(parse(*argv))
    assert exc.value.code == 2
    assert f"'{field}'" in capsys.readouterr().err


def test_empty_api_key_env_means_no_key(monkeypatch):
    monkeypatch.setenv("KUBELLM_API_KEY", "")
    assert resolve_configs(parse())[1].api_key is None


def test_model_flag_as_vllm_spells_it(capsys):
    engine, _ = resolve_configs(parse("--model", "some/dir"))
    assert engine.model == "some/dir"
    assert resolve_configs(parse("some/dir", "--model", "some/dir"))[0].model == "some/dir"
    with pytest.raises(SystemExit):
        resolve_configs(parse("a/dir", "--model", "another/dir"))
    assert "given twice" in capsys.readouterr().err


def test_api_parity_flags(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    engine, server = resolve_configs(parse(
        "--max-logprobs", "5", "--generation-config", "vllm", "--chat-template",
        str(template), "--tool-call-parser", "llama3_json", "--enable-auto-tool-choice"))
    assert (engine.max_logprobs, engine.generation_config) == (5, "vllm")
    assert server.chat_template == str(template) and server.enable_auto_tool_choice
    assert server.tool_call_parser == "llama3_json"


@pytest.mark.parametrize("argv,field", [
    (["--chat-template", "no/such/file.jinja"], "chat_template"),
    (["--max-logprobs", "-2"], "max_logprobs"),
])
def test_api_parity_flags_are_checked(argv, field, capsys):
    with pytest.raises(SystemExit):
        resolve_configs(parse(*argv))
    assert f"'{field}'" in capsys.readouterr().err
