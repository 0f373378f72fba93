"""The checks made around every timed call (experiments/core/checks.py): an unwritten
(NaN-poisoned) element is found wherever it lies, on the CPU and, where there is one, the GPU."""

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_nan_check_finds_one_unwritten_element_anywhere(dtype):
    from experiments.core.checks import has_nan
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        # float16 values whose sum overflows: the check must not take the inf for a NaN
        x = torch.rand(1 << 20, device=device).add(60000 if dtype == torch.float16 else 0.5)
        x = x.to(dtype)
        assert not has_nan(x) and not has_nan(x[:0])
        x[7] = float("inf")
        assert not has_nan(x), "an inf is no unwritten element"
        for where in (0, 12345, x.numel() - 1):
            y = x.clone()
            y[where] = float("nan")
            assert has_nan(y), (device, dtype, where)
            assert has_nan(y.view(1024, -1)), "a matrix output is checked whole"
