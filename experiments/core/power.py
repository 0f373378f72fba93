"""Power a device can draw: the window's mean power from NVML's stepping energy counter, or
nothing (with the reason), never a number the enforced power limit forbids.

NVML's energy counter moves in steps tens of ms apart, and a step's time is known only to a
poll. Power from it is trusted only where that error is within POWER_TOLERANCE:
between steps (at least COUNTER_MIN_STEPS) spanning poll / tolerance, or from the first and last
polls' readings when they lie MAX_STEP_S / tolerance apart. NVML's power reading is an average over
POWER_AVERAGE_S: it speaks for windows that long. Anything else is null (ENERGY_UNRESOLVED), and
so is a reading above the enforced limit by more than POWER_TOLERANCE: the device cannot draw it,
so the estimate is wrong (the counter's ends alone can give several times the cap).
"""

from __future__ import annotations

import math
import statistics

POWER_TOLERANCE = 0.05
COUNTER_MIN_STEPS = 3
MAX_STEP_S = 0.1
POWER_AVERAGE_S = 1.0
ENERGY_UNRESOLVED = ("energy not resolved: the timed window is too short for NVML's stepping "
                     "energy counter and its 1 s power average")
ABOVE_LIMIT = "power read above the enforced limit"
POWER_LIMITS_W: dict[int, float] = {}  # enforced limit per GPU index, as Conditions read it


def counter_power_w(samples: list[dict], poll_s: float) -> float | None:
    """Mean power (W) between the first and the last step of the energy counter (mJ) the polls
    saw; None with fewer than COUNTER_MIN_STEPS steps or steps closer than poll / tolerance."""
    seen = [(x["t"], x["energy"]) for x in samples if x.get("energy") is not None]
    # a step happened between the poll that first saw it and the one before: take the middle
    steps = [((seen[i - 1][0] + seen[i][0]) / 2, seen[i][1]) for i in range(1, len(seen))
             if seen[i][1] != seen[i - 1][1]]
    if len(steps) < COUNTER_MIN_STEPS or steps[-1][0] - steps[0][0] < poll_s / POWER_TOLERANCE:
        return None
    return (steps[-1][1] - steps[0][1]) / 1000 / (steps[-1][0] - steps[0][0])


def window_power(samples: list[dict], window_s: float, poll_s: float,
                 limit_w: float | None) -> tuple[float | None, str]:
    """(mean power in W, '') where the counter's steps, the first and last polls' counter
    readings or the 1 s readings resolve the window; (None, why) otherwise, and where it
    exceeds `limit_w` by more than the tolerance."""
    power = counter_power_w(samples, poll_s)
    ends = [(x["t"], x["energy"]) for x in samples if x.get("energy") is not None]
    if power is None and len(ends) > 1 and ends[-1][1] > ends[0][1] \
            and ends[-1][0] - ends[0][0] >= MAX_STEP_S / POWER_TOLERANCE:
        power = (ends[-1][1] - ends[0][1]) / 1000 / (ends[-1][0] - ends[0][0])
    if power is None and window_s >= POWER_AVERAGE_S:
        readings = [x["power"] for x in samples if x.get("power") is not None]
        power = float(statistics.median(readings)) if readings else None
    if power is None:
        return None, ENERGY_UNRESOLVED + f" ({window_s * 1e3:.0f} ms)"
    if limit_w and power > limit_w * (1 + POWER_TOLERANCE):
        return None, (f"{ABOVE_LIMIT}: {power:.0f} W over {limit_w:.0f} W in a "
                      f"{window_s * 1e3:.0f} ms window")
    return power, ""


def drop_impossible_power(rows, limit_w) -> int:
    """Recorded rows (a DataFrame) whose power_w exceeds `limit_w` (system -> enforced limit, W)
    by more than POWER_TOLERANCE: power_w, energy_j, j_per_flop and j_per_byte set to NaN in
    place, `energy_note` saying why (the raw rows keep no counter steps to recompute from).
    Returns how many rows it cleared."""
    if "power_w" not in rows or "system" not in rows:
        return 0
    limit = rows["system"].map(limit_w).astype(float)
    power = rows["power_w"].astype(float)
    bad = power > limit * (1 + POWER_TOLERANCE)
    if "energy_note" not in rows:
        rows["energy_note"] = ""
    rows.loc[bad, "energy_note"] = [
        f"{ABOVE_LIMIT}: {p:.0f} W over {lim:.0f} W; the energy counter's steps cannot resolve "
        f"this window, so power and energy are left out" for p, lim in
        zip(power[bad], limit[bad])]
    for col in ("power_w", "energy_j", "j_per_flop", "j_per_byte"):
        if col in rows:
            rows.loc[bad, col] = math.nan
    return int(bad.sum())
