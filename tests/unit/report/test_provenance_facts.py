"""Device facts and device state as a person reads them: words for internal names, sizes in
their units, no Python dicts or lists, no float noise."""

from experiments.report import provenance


def test_nested_facts_read_as_words_and_numbers():
    text = provenance.fact("extra", {
        "torch_threads": 16, "team": list(range(16)) + [32],
        "placement": {"threads": 16, "numa_nodes": [0]},
        "cache_total_bytes": {"L1": 786432, "L3": 314572800}})
    assert text == ("torch threads 16, team 0-15, 32, placement (threads 16, numa nodes 0), "
                    "cache total bytes (L1 768 KiB, L3 300 MiB)")
    assert "{" not in text and "[" not in text


def test_memory_in_gib_and_caches_in_binary_units():
    assert provenance.fact("memory_bytes", 85_520_809_984) == "80 GiB"
    assert provenance.fact("llc_bytes", 60 * 2**20) == "60 MiB"
    assert provenance.fact("cache_bytes", {"L1": 48 * 2**10, "L2": 2 * 2**20}) == \
        "L1 48 KiB, L2 2 MiB"
    assert provenance.fact("max_clock_mhz", 1980.0) == "1,980"
