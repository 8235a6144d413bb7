"""Validation and model choice: the purged validation slice, a validation record every
``train.validate_every`` steps, hold as a candidate, ``train.patience``, resume, and
``lobsurf eval RUN --checkpoint chosen|last|STEP``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.step import train_step
from lobsurf.cli import main
from lobsurf.errors import UserError
from lobsurf.training.data import load_training_data
from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload, write_packed_atomic
from lobsurf.training.recovery.checkpoint_file import unpack_file
from lobsurf.training.recovery.run_folder import read_metrics
from lobsurf.training.recovery.saved_config import load_run_config
from lobsurf.training.run.state import build_state, step_config
from lobsurf.training.selection import validate as validate_module
from lobsurf.training.selection.choice import CHOSEN_JSON, CHOSEN_PT, ModelChoice, load_chosen
from lobsurf.training.selection.validate import Validator
from tests.agent.conftest import tiny_config
from tests.training.test_choice import edge
from tests.training.test_train_command import train

#: validation on, every 5 steps of the tiny run (20 steps, checkpoints at 10 and 20)
VALIDATED = ("--set", "data.validation_fraction=0.2", "--set", "train.validate_every=5")
#: every trade loses (a fee far above any move of the tiny store): hold must be chosen
LOSING = ("--set", "sim.fee_per_lot=1000.0")
RECORD_KEYS = {"event", "step", "val_net_pnl", "val_trades", "val_win_rate",
               "val_pnl_per_trade", "val_pnl_per_trade_ci", "val_capture",
               "train_sweep_win_rate", "train_sweep_net_pnl", "val_choice_trades",
               "val_choice_net_pnl", "val_confirm_trades", "val_confirm_net_pnl",
               "val_confirm_pnl_per_trade_ci", "candidate", "confirmed", "best_step",
               "chosen"}


def validations(run) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["event"] == "validation"]


def evaluate(capsys, run, *args) -> dict:
    assert main(["eval", str(run), "--json", "--no-progress", "--envs", "16", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_validation_slice_is_purged_on_both_sides(tiny_store):
    cfg = tiny_config(tiny_store.path, data={"validation_fraction": 0.2})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    vs, window, horizon = data.validation, cfg.sim.window, cfg.labels.max_horizon
    # held-out side untouched: the slice ends before the held-out purge gap
    assert vs.stop_row == data.split.cut_row - horizon
    assert int(vs.rows.max()) < vs.stop_row
    # validation windows start at or after the validation cut
    assert int(vs.rows.min()) - window + 1 >= vs.cut_row
    # the simulator's book ends so that every label horizon of its last row ends before
    # the validation cut; its windows (and their labels) too
    assert len(data.train_book) == data.train_stop
    assert data.train_stop - 1 + horizon < vs.cut_row
    assert int(vs.fit_rows.max()) + horizon < vs.cut_row
    assert torch.equal(data.fit_rows, vs.fit_rows)
    # about a fifth of the rows before the held-out purge
    assert abs(vs.cut_row - 0.8 * vs.stop_row) <= 1
    # the simulator, stepped, fills before the purge gap ahead of the validation cut
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    for step in range(30):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    filled = int(state.replay.size)
    rows = torch.cat([state.replay.storage.row[:filled], state.replay.storage.next_row[:filled]])
    assert int(rows.max()) + cfg.sim.latency_rows < data.train_stop
    # the memorisation gauge sweeps as many of the simulator's last rows, in its book
    validator = Validator(cfg, data, "cpu")
    assert len(validator.train_rows) == len(vs.rows)
    assert torch.equal(validator.train_rows, vs.fit_rows[-len(vs.rows):])
    assert validator.train_book is data.train_book and len(validator.val_book) == vs.stop_row


def test_too_small_a_validation_slice_is_one_clear_error(tiny_store, tiny_toml, tmp_path,
                                                         capsys):
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "r",
                 "--set", "data.validation_fraction=0.05") == 2
    err = capsys.readouterr().err
    assert "validation slice" in err and "10 decision rows" in err
    assert "train.min_validation_trades" in err and "30" in err
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "r",
                 "--overwrite", "--set", "data.validation_fraction=1.5") == 2
    assert "validation_fraction must be in [0, 1)" in capsys.readouterr().err


@pytest.fixture
def hold_run(tiny_store, tiny_toml, tmp_path, capsys):
    """A validated tiny run in which every trade loses: hold is chosen."""
    run = tmp_path / "hold"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 *VALIDATED, *LOSING) == 0
    return run, capsys.readouterr().out


def test_a_validation_every_validate_every_steps_and_hold_chosen(hold_run):
    run, out = hold_run
    records = validations(run)
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    for r in records:
        assert RECORD_KEYS <= set(r)
        assert r["chosen"] == "hold" and r["best_step"] is None
        assert r["val_optimal_net_pnl"] >= 0
        # the halves split the slice's trades
        assert r["val_choice_trades"] + r["val_confirm_trades"] == r["val_trades"]
        assert r["val_choice_net_pnl"] + r["val_confirm_net_pnl"] == pytest.approx(
            r["val_net_pnl"])
    assert any(r["val_trades"] > 0 for r in records)  # it traded, and lost
    chosen = json.loads((run / CHOSEN_JSON).read_text())
    assert chosen["policy"] == "hold" and not (run / CHOSEN_PT).exists()
    assert "no checkpoint made money on the choice half" in chosen["reason"]
    assert chosen["false_edge_rate"] == 0.025 and "confirmed once" in chosen["rule"]
    assert "no edge found on validation" in out
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert end["event"] == "run_end" and end["stopped"] == "steps"
    assert end["chosen"]["policy"] == "hold"


def test_eval_trades_hold_when_hold_is_chosen(hold_run, capsys):
    run, _ = hold_run
    result = evaluate(capsys, run)
    assert result["chosen"]["policy"] == "hold" and result["chosen"]["source"] == "chosen"
    assert "no checkpoint made money on the choice half" in result["chosen"]["reason"]
    agent = result["policies"]["agent"]
    assert agent["trades"] == 0 and agent["net_pnl"] == 0 and agent["hold_fraction"] == 1.0
    assert result["settings"]["checkpoint"] == "hold"
    assert main(["eval", str(run), "--no-progress", "--envs", "16"]) == 0
    assert "no edge found on validation" in capsys.readouterr().out


def test_a_choice_saved_by_the_earlier_rule_still_evaluates(hold_run, capsys):
    # chosen.json and chosen.pt as the rule that judged each validation alone wrote them
    run, _ = hold_run
    ckpt = load_payload(next(p for p in list_checkpoints(run) if p.name == "step_00000010.pt"))
    write_packed_atomic(run / CHOSEN_PT, {
        "format": "lobsurf-chosen", "version": 1, "step": 10, "online": ckpt["online"],
        "controllers": ckpt["controllers"], "config": {},
        "validation": {"net_pnl": 5.0, "trades": 40, "pnl_per_trade_ci": [0.1, 0.4]}})
    reason = ("beat hold on validation beyond its 95 % CI: step 10, net PnL 5.00 over 40 "
              "trades, PnL per trade CI [0.10, 0.40]")
    (run / CHOSEN_JSON).write_text(json.dumps({
        "policy": "checkpoint", "step": 10, "reason": reason, "validations": 4,
        "validated_to_step": 20,
        "validation": {"net_pnl": 5.0, "trades": 40, "pnl_per_trade_ci": [0.1, 0.4]}}))
    old = evaluate(capsys, run)
    assert old["chosen"] == {"policy": "checkpoint", "step": 10, "source": "chosen",
                             "reason": reason}
    assert old["settings"]["checkpoint"] == CHOSEN_PT and old["settings"]["trained_steps"] == 10


def test_eval_checkpoint_last_and_step(hold_run, capsys):
    run, _ = hold_run
    last = evaluate(capsys, run, "--checkpoint", "last")
    assert last["chosen"] == {"policy": "checkpoint", "step": 20, "source": "last"}
    assert last["settings"]["checkpoint"] == "step_00000020.pt"
    ten = evaluate(capsys, run, "--checkpoint", "10")
    assert ten["chosen"] == {"policy": "checkpoint", "step": 10, "source": "step"}
    assert main(["eval", str(run), "--checkpoint", "7", "--no-progress"]) == 2
    assert "no checkpoint of step 7" in capsys.readouterr().err
    assert main(["eval", str(run), "--checkpoint", "best", "--no-progress"]) == 2
    assert "expected chosen, last or a step" in capsys.readouterr().err


def test_patience_stops_the_run_with_a_final_checkpoint(tiny_store, tiny_toml, tmp_path,
                                                        capsys):
    run = tmp_path / "patient"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run, *VALIDATED,
                 *LOSING, "--steps", 40, "--set", "train.patience=2") == 0
    assert "stopped early at step 10" in capsys.readouterr().out
    assert [r["step"] for r in validations(run)] == [5, 10]
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert end["event"] == "run_end" and end["step"] == 10 and end["stopped"] == "patience"
    assert "no new best in 2 validations" in end["reason"]
    assert load_payload(list_checkpoints(run)[-1])["step"] == 10
    # the ended run stays ended: a resume trains nothing and says why again
    assert train("--resume", run, "--steps", 40) == 0
    assert [r["step"] for r in validations(run)] == [5, 10]
    assert read_metrics(run / "metrics.jsonl")[-1]["stopped"] == "patience"


def test_resume_keeps_the_patience_count(tiny_store, tiny_toml, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    options = (*VALIDATED, *LOSING, "--set", "train.patience=3")
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight,
                 "--steps", 40, *options) == 0
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", split,
                 "--steps", 10, *options) == 0
    assert train("--resume", split, "--steps", 40) == 0
    # two validations before the resume, the third after it ends the run (a count reset
    # by the resume would run on to step 25)
    assert [r["step"] for r in validations(split)] == [5, 10, 15]
    assert validations(split) == validations(straight)
    assert read_metrics(split / "metrics.jsonl")[-1]["step"] == 15


@pytest.fixture
def every_one_a_candidate(monkeypatch):
    """The rule replaced so that a tiny run chooses a checkpoint (the rule itself:
    tests/training/test_choice.py)."""
    monkeypatch.setattr("lobsurf.training.selection.choice.is_candidate",
                        lambda metrics, min_trades: True)
    monkeypatch.setattr("lobsurf.training.selection.choice.is_confirmed", lambda *args: True)


def test_the_chosen_checkpoint_is_evaluated_and_survives_a_resume(
        every_one_a_candidate, tiny_store, tiny_toml, tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    options = (*VALIDATED, "--set", "train.checkpoint_every=5", "--set",
               "train.keep_checkpoints=10")
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight,
                 *options) == 0
    records = validations(straight)
    best = max(records, key=lambda r: r["val_choice_net_pnl"])
    assert records[-1]["best_step"] == best["step"]
    chosen = json.loads((straight / CHOSEN_JSON).read_text())
    assert chosen["policy"] == "checkpoint" and chosen["step"] == best["step"]
    # chosen.pt holds that step's network: eval of it equals eval of the step's checkpoint
    payload = load_chosen(straight, best["step"])
    ckpt = load_payload(next(p for p in list_checkpoints(straight)
                             if p.name == f"step_{best['step']:08d}.pt"))
    for name, value in ckpt["online"].items():
        if "eps_" not in name:  # noise buffers: zeroed in the policy (mean weights)
            assert torch.equal(payload["online"][name], value), name
    capsys.readouterr()
    a = evaluate(capsys, straight)
    b = evaluate(capsys, straight, "--checkpoint", str(best["step"]))
    assert a["chosen"]["policy"] == "checkpoint" and a["chosen"]["source"] == "chosen"
    assert a["chosen"]["step"] == best["step"] and a["settings"]["checkpoint"] == CHOSEN_PT
    assert a["policies"]["agent"] == b["policies"]["agent"]
    # a resume restores the choice from its checkpoint and rewrites both files, even over a
    # chosen.pt left by steps after that checkpoint
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", split, *options,
                 "--steps", 10) == 0
    (split / CHOSEN_JSON).write_text(json.dumps({"policy": "hold", "reason": "stale"}))
    assert train("--resume", split, "--steps", 20) == 0
    assert (split / CHOSEN_JSON).read_text() == (straight / CHOSEN_JSON).read_text()
    got, want = unpack_file(split / CHOSEN_PT), unpack_file(straight / CHOSEN_PT)
    assert got["step"] == want["step"]
    for name in want["online"]:
        assert torch.equal(got["online"][name], want["online"][name]), name


def _weights():
    return {"w": torch.arange(4.0)}, ControllerState.bootstrap("cpu").as_dict()


def test_a_failed_write_leaves_the_previous_chosen_policy_whole(tmp_path, monkeypatch):
    choice = ModelChoice(min_trades=2, patience=0)
    choice.update(10, edge(100.0), _weights)
    choice.write_files(tmp_path, {})
    assert load_chosen(tmp_path, 10)["step"] == 10
    choice.update(20, edge(200.0), _weights)

    class Torn:  # a disk that fills after the first chunk of the new file
        def __init__(self, packed):
            self.packed = packed

        def chunks(self, size):
            yield next(iter(self.packed.chunks(size)))
            raise OSError(28, "No space left on device")

    from lobsurf.training.recovery import checkpoint

    real_pack = checkpoint.pack
    monkeypatch.setattr(checkpoint, "pack", lambda payload: Torn(real_pack(payload)))
    with pytest.raises(UserError, match="No space left"):
        choice.write_files(tmp_path, {})
    assert load_chosen(tmp_path, 10)["step"] == 10  # the previous file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHOSEN_JSON, CHOSEN_PT]


def test_a_run_saved_before_validation_keeps_its_rows(tiny_store, tiny_toml, tmp_path):
    run = tmp_path / "old"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--steps", 5) == 0
    text = (run / "config.toml").read_text()
    (run / "config.toml").write_text(text.replace("validation_fraction = 0.0\n", ""))
    assert "validation_fraction" not in (run / "config.toml").read_text()
    assert load_run_config(run).data.validation_fraction == 0.0


def test_a_rollback_takes_the_choice_back_to_its_checkpoint(
        every_one_a_candidate, tiny_store, tiny_toml, tmp_path, monkeypatch):
    from tests.training.test_reliability_divergence import _spoil_parameter, inject_after_step

    # a NaN after step 16 is found at step 20: back to the checkpoint of step 10, whose
    # choice has seen the validations of steps 5 and 10 only (not the abandoned 15)
    inject_after_step(monkeypatch, 16, _spoil_parameter)
    run = tmp_path / "rolled"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 *VALIDATED) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert any(r["event"] == "rollback" and r["to_step"] == 10 for r in records)
    assert [r["step"] for r in validations(run)] == [5, 10, 15, 20]
    chosen = json.loads((run / CHOSEN_JSON).read_text())
    assert chosen["validations"] == 4 and chosen["validated_to_step"] == 20
    best = max(validations(run), key=lambda r: r["val_choice_net_pnl"])
    assert chosen["step"] == best["step"]


@pytest.mark.slow
def test_two_processes_validate_on_rank_0_and_stop_together(tiny_store, tiny_toml, tmp_path):
    from tests.training.test_distributed import _ok, _torchrun

    run = tmp_path / "two"
    _ok(_torchrun(2, "--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                  *VALIDATED, *LOSING, "--steps", 40, "--set", "train.patience=2"))
    assert [r["step"] for r in validations(run)] == [5, 10]  # rank 0 alone writes them
    end = read_metrics(run / "metrics.jsonl")[-1]
    assert end["stopped"] == "patience" and end["step"] == 10  # every rank stopped there
    assert json.loads((run / CHOSEN_JSON).read_text())["policy"] == "hold"


def _hand_made_q_(state, buy: int) -> None:
    """Q's output layer set by hand: mean weights 0, so its logits are its bias. Every action
    but ``buy`` puts all its mass on the middle atom (E[Q] = 0); ``buy`` puts 0.55 on the top
    atom and 0.45 on the bottom one (E[Q] = 0.1 on atoms -1 .. 1): argmax E[Q] is ``buy``,
    while a Thompson sample of it is negative 45 % of the time and its P(return > 0), 0.55,
    is below a gate threshold of 0.99. The noise scales are large and the noise is drawn, so
    noisy weights would scramble every logit."""
    layer = state.online.q_out
    atoms = state.online.cfg.num_atoms
    bias = torch.full((state.online.num_actions, atoms), -30.0)
    bias[:, atoms // 2] = 30.0
    bias[buy] = -30.0
    bias[buy, -1], bias[buy, 0] = 30.0, 30.0 - math.log(0.55 / 0.45)
    with torch.no_grad():
        layer.weight_mu.zero_()
        layer.bias_mu.copy_(bias.reshape(-1))
        layer.weight_sigma.fill_(50.0)
        layer.bias_sigma.fill_(50.0)
        state.online.resample_noise_(torch.Generator().manual_seed(1))
        state.controllers.gate_threshold.fill_(0.99)
    assert float(layer.eps_out.abs().sum()) > 0


def test_the_validation_sweep_is_greedy_at_mean_weights_without_gates(tiny_store, monkeypatch):
    cfg = tiny_config(tiny_store.path, data={"validation_fraction": 0.2})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    state = build_state(cfg, data, "cpu")
    buy = 1  # the simulator's actions: hold, then one buy per order size, then the sells
    _hand_made_q_(state, buy)
    swept = []
    real_sweep = validate_module.sweep

    def recording_sweep(book, rows, policies, *args, **kwargs):
        records, tiling = real_sweep(book, rows, policies, *args, **kwargs)
        swept.append(records["agent"])
        return records, tiling

    monkeypatch.setattr(validate_module, "sweep", recording_sweep)
    validator = Validator(cfg, data, "cpu")
    first = validator(state)
    val_actions, train_actions = (r.step_action for r in swept)
    # argmax E[Q] at the mean weights is buy, at every step of both sweeps
    assert len(val_actions) > 30 and len(train_actions) > 30
    assert (val_actions == buy).all() and (train_actions == buy).all()
    # deterministic: a second sweep of the same checkpoint gives the same results
    assert validator(state) == first
    assert all((a.step_action == b.step_action).all() for a, b in zip(swept[:2], swept[2:]))
