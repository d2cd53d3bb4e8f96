"""The engine core compiles a request's grammar on a thread of its own before the engine
takes the request in: requests without one (and the loop's steps) never wait behind a
compile, a compile that fails is refused as a parameter error without reaching the
engine, and a request aborted while its grammar compiles never reaches it either."""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

import pytest

from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
from kubellm.runtime.engine_core import wire
from kubellm.runtime.engine_core.core_proc import EngineCore


class _Compiler:
    def __init__(self):
        self.release = threading.Event()
        self.threads: list[str] = []

    def compile(self, spec):
        self.threads.append(threading.current_thread().name)
        assert self.release.wait(30), "the test never released the compile"
        if spec.regex == "(":
            raise ParameterError(spec.param, "cannot compile the regex")
        return object()


class _Grammar:
    def __init__(self):
        self.compiler = _Compiler()

    def get(self):
        return self.compiler


@dataclass
class _Stats:
    num_waiting: int = 0


class _Engine:
    """Just what EngineCore calls; records what reached it."""

    def __init__(self):
        self.grammar = _Grammar()
        self.added: list[str] = []
        self.dead_error = None

    def add_request(self, request_id, prompt_token_ids, params, priority=0):
        self.added.append(request_id)

    def abort_request(self, request_id):
        pass

    def has_unfinished_requests(self):
        return False

    def get_stats(self):
        return _Stats()


@pytest.fixture
def core(tmp_path):
    old_term = signal.getsignal(signal.SIGTERM)
    engine = _Engine()
    core = EngineCore(engine, str(tmp_path), 1, os.getpid())
    yield core
    engine.grammar.compiler.release.set()
    core.close()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, old_term)


def _add(core, request_id, params):
    core._apply([wire.ADD, 0, request_id, [1, 2, 3], params, 0])


def _settle(core, request_id):
    """Wait for the compile, then let the loop's receive phase pick the request up."""
    core._compiling[request_id][2].exception(timeout=30)
    core._receive(1000)


def test_plain_requests_do_not_wait_behind_a_compile(core):
    engine = core.engine
    _add(core, "g", SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+")))
    _add(core, "p", SamplingParams())
    assert engine.added == ["p"] and "g" in core._compiling
    engine.grammar.compiler.release.set()
    _settle(core, "g")
    assert engine.added == ["p", "g"] and not core._compiling
    assert core._pending[0].accepted == ["p", "g"]
    assert engine.grammar.compiler.threads[0].startswith("kubellm-grammar")


def test_a_grammar_that_does_not_compile_is_refused_before_the_engine(core):
    engine = core.engine
    engine.grammar.compiler.release.set()
    _add(core, "bad", SamplingParams(structured_outputs=StructuredOutputsParams(regex="(")))
    _settle(core, "bad")
    assert engine.added == [] and core._pending[0].accepted == []
    (request_id, kind, message, param), = core._pending[0].rejections
    assert (request_id, kind, param) == ("bad", "param", "structured_outputs")
    assert "cannot compile" in message


def test_aborted_while_compiling_never_reaches_the_engine(core):
    engine = core.engine
    _add(core, "g", SamplingParams(structured_outputs=StructuredOutputsParams(regex="a")))
    future = core._compiling["g"][2]
    core._apply([wire.ABORT, 0, ["g"]])
    engine.grammar.compiler.release.set()
    future.exception(timeout=30)
    core._receive(0)
    assert engine.added == [] and core._pending[0].accepted == []


def test_shutdown_refuses_requests_still_compiling(core):
    _add(core, "g", SamplingParams(structured_outputs=StructuredOutputsParams(regex="a")))
    core._abort_everything("the server is shutting down", kind="shutdown")
    assert [r[:2] for r in core._pending[0].rejections] == [["g", "shutdown"]]
    assert not core._compiling


def test_a_failed_step_leaves_requests_still_compiling_alone(core):
    _add(core, "g", SamplingParams(structured_outputs=StructuredOutputsParams(regex="a")))
    core._abort_everything("engine step failed", kind="engine_error")
    assert core._pending[0].rejections == [] and "g" in core._compiling
    core.engine.grammar.compiler.release.set()
    _settle(core, "g")
    assert core.engine.added == ["g"]
