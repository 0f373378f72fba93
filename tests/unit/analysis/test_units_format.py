"""The one number formatter (experiments/analysis/units.py): what every caller writes."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.analysis import units
from experiments.analysis.units import (MISSING, binary, interval, memory, num, qty, ratio, share,
                                        words)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, "12", True])
def test_a_missing_value_is_written_one_way(value):
    for text in (num(value), qty(value, "B/s"), interval(value, 1, 2, "s"), share(value),
                 ratio(value), binary(value), memory(value)):
        assert text == MISSING


def test_no_float_noise_nor_scientific_notation():
    assert num(3.13e-16) == "≈ 0" and num(-7.2e-17) == "≈ 0"
    assert num(10.6337890625) == "10.6"
    assert num(1180) == "1,180" and num(0.00302) == "0.00302"
    assert qty(2.7e-5, "s") == "27 µs" and qty(999.7e9, "B/s") == "1 TB/s"
    assert interval(4.29e12, 4.27e12, 4.33e12, "B/s") == "4.29 TB/s [4.27, 4.33]"


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e18, max_value=1e18))
def test_any_finite_number_reads_without_noise(value):
    if 1 <= abs(value) < 9e17:  # prefixed: "999" or "1.23", never "1,000 G"
        assert len(qty(value, "FLOP/s").split(" ")[0].lstrip("-")) <= 4
    for text in (num(value), qty(value, "s"), qty(value, "FLOP/s")):
        assert text and "e" not in text.split(" ")[0] and "nan" not in text
        number = text.split(" ")[0]
        assert len(number.partition(".")[2]) <= 9  # "0.000000123" at most: no run of zeros


def test_memory_in_whole_gib_as_the_product_is_named():
    assert memory(85_520_809_984) == "80 GiB"  # what torch reports for an "H100 80GB"
    assert memory(150_031_695_872) == "140 GiB"  # an H200
    assert memory(16_673_804_288) == "16 GiB"  # a "16 GB" host's MemTotal
    assert memory(512 * 2**20) == "512 MiB"
    assert binary(32 * 2**10) == "32 KiB" and binary(1.5 * 2**20) == "1.5 MiB"


def test_internal_names_read_as_words_from_one_table():
    for raw in ("dram_bw", "matrix_flops", "host_nosync", "llc_bytes", "vector_flops"):
        assert "_" not in words(raw) and words(raw) == units.WORDS[raw]
    assert words("l2_bw") == "L2 bandwidth"
    assert words("dram_bw_numa1") == "DRAM bandwidth, NUMA node 1"
    assert words("some_new_name") == "some new name"
