"""lobsurf.agent.flat: parameters moved into one buffer keep their values, module outputs,
state dicts and gradients; segments aligned, gaps zero; misuse refused."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import lobsurf.agent.flat as flat_module
from lobsurf.agent.flat import SEGMENT_ALIGN_BYTES, flatten_parameters_, segment_offsets


def _net() -> nn.Module:
    torch.manual_seed(0)
    # odd widths, so segments need padding to stay aligned
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def test_segment_offsets_are_aligned_and_cover_each_segment() -> None:
    offsets, total = segment_offsets([5, 16, 1, 33], element_bytes=4)
    step = SEGMENT_ALIGN_BYTES // 4
    assert offsets == (0, step, 2 * step, 3 * step)
    assert total == 3 * step + 48 and total % step == 0


def test_flattened_module_keeps_values_outputs_and_state_dict() -> None:
    net, ref = _net(), _net()
    x = torch.randn(4, 5)
    flat = flatten_parameters_(net.parameters(), with_grads=True)
    torch.testing.assert_close(net(x), ref(x), rtol=0, atol=0)
    for p, view, o in zip(net.parameters(), flat.views(flat.data), flat.offsets):
        assert p.data_ptr() == view.data_ptr()
        assert (o * p.element_size()) % SEGMENT_ALIGN_BYTES == 0
    # the parameters are the buffer: an in-place change of the buffer is a change of the net
    flat.data.mul_(2.0)
    torch.testing.assert_close(dict(net.named_parameters())["0.weight"],
                               2.0 * dict(ref.named_parameters())["0.weight"])
    # a state dict loads by copy, into the buffer
    net.load_state_dict(ref.state_dict())
    torch.testing.assert_close(net(x), ref(x), rtol=0, atol=0)
    flat.check()
    # the gaps hold zeros
    used = sum(p.numel() for p in net.parameters())
    assert flat.data.numel() > used
    assert float(flat.data.abs().sum()) == pytest.approx(
        sum(float(p.detach().abs().sum()) for p in net.parameters()))


@pytest.mark.parametrize("piece", [None, 3])
def test_written_gradients_equal_autograd_and_none_writes_zeros(monkeypatch, piece) -> None:
    # piece 3: every segment and gap copied in pieces of at most 3 values (on CUDA the
    # pieces are what spreads the copy over blocks: GRAD_COPY_PIECE)
    if piece is not None:
        monkeypatch.setattr(flat_module, "GRAD_COPY_PIECE", piece)
    net, ref = _net(), _net()
    flat = flatten_parameters_(net.parameters(), with_grads=True)
    flat.grad.fill_(9.0)  # stale values everywhere, gaps included: all must be overwritten
    x = torch.randn(6, 5)
    grads = list(torch.autograd.grad(net(x).square().sum(), list(net.parameters())))
    ref(x).square().sum().backward()
    grads[1] = None  # a parameter the loss does not reach
    flat.write_gradients_(grads)
    for i, (p, q) in enumerate(zip(net.parameters(), ref.parameters())):
        want = torch.zeros_like(q) if i == 1 else q.grad
        torch.testing.assert_close(p.grad, want, rtol=1e-6, atol=1e-7)
    assert float(flat.grad.abs().sum()) == pytest.approx(
        sum(float(p.grad.abs().sum()) for p in net.parameters()))


def test_a_deepcopy_flattens_to_the_same_layout() -> None:
    online = _net()
    target = copy.deepcopy(online)
    a = flatten_parameters_(online.parameters(), with_grads=True)
    b = flatten_parameters_(target.parameters(), with_grads=False)
    assert a.same_layout(b) and b.grad is None
    torch.testing.assert_close(a.data, b.data, rtol=0, atol=0)
    other = flatten_parameters_(nn.Linear(3, 2).parameters(), with_grads=False)
    assert not a.same_layout(other)


def test_misuse_is_refused() -> None:
    net = _net()
    flat = flatten_parameters_(net.parameters(), with_grads=True)
    first = next(net.parameters())
    first.grad = torch.zeros_like(first)  # reassigned: the buffer would go stale
    with pytest.raises(RuntimeError, match="reassigned"):
        flat.check()
    with pytest.raises(ValueError, match="without gradients"):
        flatten_parameters_(_net().parameters(), with_grads=False).write_gradients_([None] * 4)
    mixed = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, dtype=torch.float64))]
    with pytest.raises(ValueError, match="several dtypes"):
        flatten_parameters_(mixed, with_grads=False)
    with pytest.raises(ValueError, match="no parameters"):
        flatten_parameters_([], with_grads=False)


def test_a_deepcopy_of_network_and_optimizer_stays_flat() -> None:
    from lobsurf.agent.optim import TensorAdam

    net = _net()
    opt = TensorAdam(net.parameters(), lr=1e-2)
    twin_net, twin_opt = copy.deepcopy((net, opt))
    twin_opt.flat.check()  # the copied parameters point into the copied buffers
    assert twin_opt.flat.params[0] is next(twin_net.parameters())
    assert twin_opt.flat.data.data_ptr() != opt.flat.data.data_ptr()
    torch.testing.assert_close(twin_opt.flat.data, opt.flat.data, rtol=0, atol=0)
    x = torch.randn(4, 5)
    for n, o in ((net, opt), (twin_net, twin_opt)):
        o.flat.write_gradients_(torch.autograd.grad(n(x).sum(), o.params))
        o.step()
    for a, b in zip(net.parameters(), twin_net.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    # the moments' per-parameter views (its state dict) still view the copied buffers
    assert twin_opt.exp_avg[0].data_ptr() == twin_opt.exp_avg_flat.data_ptr()
    torch.testing.assert_close(twin_opt.exp_avg[-1], opt.exp_avg[-1], rtol=0, atol=0)


def test_loading_an_optimizer_state_zeroes_the_gaps() -> None:
    # a diverged step spreads NaN into the gaps (0 / NaN); a restore writes the segments,
    # and must leave no NaN behind in the buffers the divergence guard reads
    from lobsurf.agent.optim import TensorAdam

    net = _net()
    opt = TensorAdam(net.parameters(), lr=1e-2)
    saved = copy.deepcopy(opt.state_dict())
    saved_params = {k: v.clone() for k, v in net.state_dict().items()}
    for buffer in (opt.flat.data, opt.flat.grad, opt.exp_avg_flat, opt.exp_avg_sq_flat):
        buffer.fill_(float("nan"))
    assert opt.flat.gaps()
    net.load_state_dict(saved_params)
    opt.load_state_dict(saved)
    for buffer in (opt.flat.data, opt.flat.grad, opt.exp_avg_flat, opt.exp_avg_sq_flat):
        assert bool(torch.isfinite(buffer).all())
