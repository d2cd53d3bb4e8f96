"""What every route needs to know about the running server, in one object on app.state."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.metrics import ServerMetrics


@dataclass
class ServerState:
    engine_client: object      # EngineCoreClient: add_request, stats, is_alive, abort_all
    tokenizer: object
    model_name: str            # the name clients send and /v1/models lists
    max_model_len: int
    vocab_size: int            # token ids in prompts must be below this
    max_chars_per_token: int   # a prompt longer than max_model_len * this is too long
    config: ServerConfig
    metrics: ServerMetrics
    preprocess_pool: ThreadPoolExecutor
    generation_defaults: dict = field(default_factory=dict)  # generation_config.json
    max_logprobs: int = 20       # --max-logprobs (resolved: -1 -> the vocabulary)
    chat_template: str | None = None   # --chat-template's text; None: the tokenizer's
    is_draining: bool = False  # set on SIGTERM: /ready and new requests answer 503
    num_in_flight: int = 0     # /v1/* requests being answered (what a drain waits for)
    num_preprocessing: int = 0  # requests being parsed/tokenized on the pool right now
