"""CPU side of the CUDA-graph wrapper: it refuses cleanly off CUDA, the loop ignores
train.cuda_graph there, and the capture-safety check passes the real step and catches a
step that rebinds a tensor or moves a host value (which a graph would freeze)."""

from __future__ import annotations

import pytest
import torch

from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.agent.step import train_step
from lobsurf.cli import build_parser
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.training.run.job import train_keywords
from lobsurf.training.run.job import flag_overrides
from lobsurf.training.speed.cuda_graph import (
    GraphConfig,
    GraphedStep,
    fingerprint_changes,
    graph_unsupported,
    state_fingerprint,
    step_generators,
)
from lobsurf.training.speed.cuda_graph import graph_enabled


def _learning_steps(state, data, scfg, n):
    for _ in range(n):
        train_step(state, data.train_book, scfg, learning=True)


def test_graph_refused_on_cpu_with_the_reason(tiny_setup) -> None:
    cfg, data, state, scfg = tiny_setup
    assert "CUDA" in graph_unsupported("cpu")
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        GraphedStep(lambda: None, state, step_generators(state), "cpu")
    with pytest.raises(ValueError, match="warmup_steps"):
        GraphConfig(warmup_steps=1)


def test_loop_ignores_cuda_graph_on_cpu(tiny_setup, capsys) -> None:
    cfg = tiny_setup[0]
    assert cfg.train.cuda_graph  # on by default
    assert graph_enabled(cfg, "cpu", None) is False
    assert capsys.readouterr().err == ""  # no complaint on CPU


def test_cli_flag_sets_train_cuda_graph() -> None:
    def sets(*argv):
        return flag_overrides(**{k: v for k, v in train_keywords(
            build_parser(["train", *argv]).parse_args(["train", *argv])).items()
            if k in ("cuda_graph", "compile")})

    assert "train.cuda_graph=false" in sets("--no-cuda-graph")
    assert "train.cuda_graph=true" in sets("--cuda-graph")
    assert not any("cuda_graph" in s for s in sets())
    assert "train.compile=false" in sets("--no-compile")
    assert "train.compile=true" in sets("--compile")
    assert not any("compile" in s for s in sets())


def test_generators_are_every_custom_generator_of_the_state(tiny_setup) -> None:
    state = tiny_setup[2]
    gens = step_generators(state)
    assert len({id(g) for g in gens}) == 4
    found = {id(v) for v in (state.noise_generator, state.acting_generator,
                             state.replay.generator, state.env.generator)}
    assert {id(g) for g in gens} == found


def test_one_shared_generator_is_registered_once(tiny_setup) -> None:
    # on CUDA one generator takes all four roles (a CPU state keeps four); a graph
    # registers it once (each registered generator costs two fill kernels before every
    # replay)
    cfg, data, state, scfg = tiny_setup
    assert len({id(g) for g in step_generators(state)}) == 4  # on CPU: four
    g = state.noise_generator
    state.acting_generator = state.replay.generator = state.env.generator = g
    assert step_generators(state) == [g]


class _FakeDefault:
    """Stands in for the default CUDA generator: its state is whichever generator it was
    last given (graphsafe_set_state shares a state; graphsafe_get_state hands it out)."""

    def __init__(self):
        self.state = "own"

    def graphsafe_get_state(self):
        return self.state

    def graphsafe_set_state(self, state):
        self.state = state


def test_one_generator_takes_the_default_ones_place_during_capture(monkeypatch) -> None:
    # a capture registers the default generator too; with one step generator, that one
    # stands in for it while capturing (one registered state: two fills a replay, not
    # four), and the default's own state comes back afterwards, also after an error
    from lobsurf.training.speed import cuda_graph

    fake, g, h = _FakeDefault(), torch.Generator(), torch.Generator()
    monkeypatch.setattr(torch.cuda, "default_generators", (fake,))
    device = torch.device("cuda", 0)
    with cuda_graph._in_the_default_slot([g], device):
        assert fake.state is g
    assert fake.state == "own"
    with pytest.raises(RuntimeError, match="capture failed"):
        with cuda_graph._in_the_default_slot([g], device):
            raise RuntimeError("capture failed")
    assert fake.state == "own"
    with cuda_graph._in_the_default_slot([g, h], device):  # several: the default stays
        assert fake.state == "own"


def test_real_step_keeps_every_address_and_host_value(tiny_setup) -> None:
    cfg, data, state, scfg = tiny_setup
    _learning_steps(state, data, scfg, 2)  # gradients and caches exist from here on
    before = state_fingerprint(state)
    assert sum(v[0] == "tensor" for v in before.values()) > 100
    assert any(k.endswith(".grad") for k in before)
    _learning_steps(state, data, scfg, 1)
    assert fingerprint_changes(before, state_fingerprint(state)) == []


def test_the_step_drawing_ahead_keeps_every_address_and_host_value(tiny_store) -> None:
    # the draw made ahead lives in buffers made at the first learning
    # step (eager, before any capture) and written in place after; its host flag stays set
    from tests.training.test_compile_kernels import _setup

    data, state, scfg = _setup(tiny_store)
    _learning_steps(state, data, scfg, 2)
    before = state_fingerprint(state)
    assert before["state.replay.ahead.ready"] == ("value", True)
    assert "state.replay.ahead.index" in before
    _learning_steps(state, data, scfg, 1)
    assert fingerprint_changes(before, state_fingerprint(state)) == []


def test_a_rebound_tensor_is_caught(tiny_setup, monkeypatch) -> None:
    cfg, data, state, scfg = tiny_setup
    _learning_steps(state, data, scfg, 2)
    original = PrioritizedReplay.write_

    def rebinding_write(self, plan):
        original(self, plan)
        self.pointer = self.pointer.clone()  # the planted bug: a graph would keep the old one

    monkeypatch.setattr(PrioritizedReplay, "write_", rebinding_write)
    before = state_fingerprint(state)
    _learning_steps(state, data, scfg, 1)
    assert fingerprint_changes(before, state_fingerprint(state)) == ["state.replay.pointer"]


def test_a_host_counter_is_caught(tiny_setup, monkeypatch) -> None:
    cfg, data, state, scfg = tiny_setup
    _learning_steps(state, data, scfg, 2)
    original = BatchedLobEnv.step
    state.env.calls = 0

    def counting_step(self, action, *args, **kwargs):
        self.calls += 1  # the planted bug: a host value a replay would never move
        return original(self, action, *args, **kwargs)

    monkeypatch.setattr(BatchedLobEnv, "step", counting_step)
    before = state_fingerprint(state)
    _learning_steps(state, data, scfg, 1)
    assert fingerprint_changes(before, state_fingerprint(state)) == ["state.env.calls"]
    assert torch.is_tensor(state.replay.pointer)


def test_train_compile_compiles_both_networks(tiny_store) -> None:
    from lobsurf.training.speed.compile import compiled
    from lobsurf.training.data import load_training_data
    from lobsurf.training.run.state import build_run_state
    from tests.agent.conftest import tiny_config

    for on, want in ((False, False), (True, True), ("auto", False)):  # auto: CUDA only
        cfg = tiny_config(tiny_store.path, train={"compile": on})
        state = build_run_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu", None, 0)
        for net in (state.online, state.target):
            assert compiled(net) is want
            assert all(not k.startswith("_orig_mod") for k in net.state_dict())


def test_compile_auto_means_cuda_in_one_process() -> None:
    from lobsurf.training.speed.compile import compile_config, compile_wanted
    from lobsurf.training.config import TrainConfig

    auto = TrainConfig()
    assert auto.compile == "auto"
    assert compile_wanted(auto, "cuda", 1) and not compile_wanted(auto, "cuda", 2)
    assert not compile_wanted(auto, "cpu", 1)
    assert compile_wanted(TrainConfig(compile=True), "cpu", 1)
    assert not compile_wanted(TrainConfig(compile=False), "cuda", 1)
    # the readable reference step never compiles
    assert not compile_wanted(TrainConfig(compile=True, reference=True), "cuda", 1)
    # combo kernels are an Inductor GPU option: only passed to CUDA compiles
    assert dict(compile_config("cuda").options) == {"combo_kernels": True}
    assert compile_config("cpu").options == ()


def test_a_failed_compilation_says_how_to_train_without_it(tiny_store, tiny_toml, tmp_path,
                                                          monkeypatch, capsys) -> None:
    from torch._dynamo.exc import TorchDynamoException

    from lobsurf.training.speed.compile import CompileConfig
    from tests.training.test_train_command import train

    class Refused(TorchDynamoException):
        pass

    def refusing(self, fn):
        def call(*args, **kwargs):
            raise Refused("an op Inductor cannot lower\nmore detail")
        return call

    monkeypatch.setattr(CompileConfig, "compile", refusing)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out",
                 tmp_path / "run", "--compile") == 2
    err = capsys.readouterr().err
    assert "compiling the training step failed (Refused: an op Inductor cannot lower)" in err
    assert "--no-compile" in err
