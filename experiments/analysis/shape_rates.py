"""Op-rate classes whose cost follows their shape, not their FLOPs alone (the op model's
readers of a class's calibration points, sweeps.op_rate):

- a GPU convolution (conv_rate): cuDNN runs one implicit GEMM a group
  (opclass.conv_gemm) with an algorithm it picks by shape, so its rate is the gemv_gemm sweep's at
  that GEMM's shape times the efficiency, measured rate over that sweep's rate, of the class's
  calibration points nearest in log (M, N, K);
- a GPU fused attention (attention_time): a flash kernel gives each (batch, head, query tile of
  ATTENTION_TILE rows) a thread block that loops over the keys, so its time is a launch, plus a
  cost per tile, plus one per tile and key; the three are fitted non-negative to the class's
  calibration points (scipy's nnls, in relative error). A short sequence pays a whole tile: its
  FLOPs say far less than its time;
- elsewhere (a CPU's convolution) one power law over FLOPs (power_law).

Every reader leaves out the points at the judged op's own input shapes (op_rate's rule).
"""

from __future__ import annotations

import math

from experiments.placement import opclass

# a calibration point at distance d (in log M, N, K) from a GPU convolution's implicit GEMM
# weighs 1 / (d + this)^2 in its efficiency (conv_rate): a point at its very shape does not
# stand alone
SHAPE_SOFTENING = 0.3
# query rows a flash attention kernel's thread block takes on Hopper (FlashAttention-3's and
# cuDNN's forward tile for head dimensions up to 256)
ATTENTION_TILE = 128
ATTENTION_TERMS = 3  # launch, per tile, per tile and key: a fit needs as many points


def conv_rate(key: str, flops: float, shapes, points: list, gemm_rate) -> float | None:
    """A GPU convolution's FLOP/s (module docstring): `points` its class's [(FLOPs, FLOP/s,
    shapes)] less its own shapes', `gemm_rate(M, N, K)` the gemv_gemm sweep's FLOP/s; None
    where its shape or no point's can be read as a GEMM."""
    import numpy as np

    dims = opclass.conv_gemm(key, shapes, flops)
    near = []
    for px, py, ps in points:
        if (at := opclass.conv_gemm(key, ps, px)) and (rate := gemm_rate(*at)):
            near.append((np.log(at), math.log(py / rate)))
    if not dims or not near or not (rate := gemm_rate(*dims)):
        return None
    d = np.array([np.linalg.norm(np.log(dims) - at) for at, _ in near])
    weight = 1.0 / (d + SHAPE_SOFTENING) ** 2
    return rate * math.exp(float(np.dot(weight, [e for _, e in near]) / weight.sum()))


def attention_work(shapes, flops: float) -> tuple[int, float] | None:
    """(query tiles, tiles x keys) of a fused attention ([q [B, H, Sq, D], k, v] shapes), its
    keys read off its FLOPs (4 D x the query-key pairs it keeps: formulas.attention), so a
    causal mask's skipped pairs are not counted; None for unreadable shapes."""
    s = opclass.parse_shapes(shapes)
    if len(s) < 3 or len(s[0]) != 4 or min(s[0]) < 1 or not flops > 0:
        return None
    b, h, sq, d = s[0]
    tiles = b * h * math.ceil(sq / ATTENTION_TILE)
    return tiles, flops / (4.0 * d * sq) * math.ceil(sq / ATTENTION_TILE)


def attention_time(flops: float, shapes, points: list) -> float | None:
    """A GPU fused attention's seconds (module docstring) from its class's `points` [(FLOPs,
    FLOP/s, shapes)] less its own shapes'; None with fewer than ATTENTION_TERMS readable points
    or unreadable shapes."""
    import numpy as np
    from scipy.optimize import nnls

    want = attention_work(shapes, flops)
    rows = [(1.0, *w, px / py) for px, py, ps in points if (w := attention_work(ps, px))]
    if want is None or len(rows) < ATTENTION_TERMS:
        return None
    a = np.array([r[:3] for r in rows])
    t = np.array([r[3] for r in rows])
    scale = a.max(axis=0)
    coef, _ = nnls(a / scale / t[:, None], np.ones(len(t)))  # relative error, each point alike
    return float(np.dot(coef / scale, (1.0, *want))) or None


def power_law(xs: list, ys: list, x: float) -> float:
    """The rate at x of log rate fitted linear in log x over every calibration size (its slope
    within [0, 1]: a larger call takes no less time), at most the best rate measured."""
    import numpy as np

    lx, ly = np.log(xs), np.log(ys)
    slope = min(1.0, max(0.0, float(np.polyfit(lx, ly, 1)[0])))
    # through the points' centroid, as the least-squares line is, at the clamped slope
    return min(max(ys), math.exp(float(ly.mean() + slope * (math.log(x) - lx.mean()))))
