"""ServerConfig: the HTTP server's own knobs, resolved like EngineConfig (defaults < YAML
< KUBELLM_* env < CLI flags), so ``KUBELLM_API_KEY`` and ``--api-key`` are one setting."""
from __future__ import annotations

from dataclasses import dataclass, field

from kubellm.runtime.config_sources import ConfigError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
TOOL_CALL_PARSERS = ("hermes", "llama3_json", "mistral")   # server/tool_parsers
# 8 MiB: a 128k-token prompt as text (~0.5 MB) or as token ids (~1 MB) with room to spare
DEFAULT_MAX_BODY = 8 * 2**20


def _knob(default, help, choices=None):
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class ServerConfig:
    # 0.0.0.0: in a pod the kubelet probes and the Service reach the pod IP, not loopback.
    host: str = _knob("0.0.0.0", "address to listen on")
    port: int = _knob(8000, "TCP port to listen on")
    served_model_name: str | None = _knob(None, "model name clients send and /v1/models "
                                                "lists (default: the model path)")
    api_key: str | None = _knob(None, "require 'Authorization: Bearer KEY' on /v1/*")
    shutdown_timeout: float = _knob(30.0, "seconds in-flight requests may run after SIGTERM")
    max_queue: int = _knob(1024, "waiting requests beyond which new ones get 503")
    uvicorn_log_level: str = _knob("info", "uvicorn log level", LOG_LEVELS)
    api_server_count: int = _knob(1, "HTTP front-end processes (they share the port and the "
                                     "engine core process)")
    max_request_body_bytes: int = _knob(DEFAULT_MAX_BODY, "largest request body accepted; "
                                                          "larger ones get 413")
    tokenizer_pool_size: int = _knob(2, "threads per front end that parse, template and "
                                        "tokenize requests off the event loop")
    chat_template: str | None = _knob(None, "chat template (a file or the Jinja text) "
                                            "instead of the tokenizer's")
    tool_call_parser: str | None = _knob(None, "how tool calls are read from the output: "
                                               "hermes | llama3_json | mistral (default: "
                                               "from the chat template)", TOOL_CALL_PARSERS)
    enable_auto_tool_choice: bool = _knob(False, "let the model decide when to call tools "
                                                 "(tool_choice auto)")

    def __post_init__(self):
        if isinstance(self.port, bool) or not isinstance(self.port, int) \
                or not 0 <= self.port <= 65535:
            raise ConfigError("port", f"must be an integer in 0..65535, got {self.port!r}")
        if not self.shutdown_timeout >= 0:
            raise ConfigError("shutdown_timeout", f"must be >= 0, got {self.shutdown_timeout}")
        if isinstance(self.max_queue, bool) or not isinstance(self.max_queue, int) \
                or self.max_queue < 1:
            raise ConfigError("max_queue", f"must be a positive integer, got {self.max_queue!r}")
        for name in ("api_server_count", "max_request_body_bytes", "tokenizer_pool_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.uvicorn_log_level not in LOG_LEVELS:
            raise ConfigError("uvicorn_log_level",
                              f"must be one of {', '.join(LOG_LEVELS)}; got "
                              f"{self.uvicorn_log_level!r}")
        if self.tool_call_parser is not None and \
                self.tool_call_parser not in TOOL_CALL_PARSERS:
            raise ConfigError("tool_call_parser", f"must be one of "
                                                  f"{', '.join(TOOL_CALL_PARSERS)}; got "
                                                  f"{self.tool_call_parser!r}")
        if self.chat_template is not None:
            from kubellm.runtime.engine.chat import load_chat_template
            try:
                load_chat_template(self.chat_template)
            except (OSError, ValueError) as exc:
                raise ConfigError("chat_template", str(exc)) from None
        if self.api_key == "":
            self.api_key = None  # an empty env var means "no key", not "the empty key"
