"""An experiment's RULES (core/config.check_rule): each kind of rule refuses what it should, with
the key and the value in the message, and lets the rest through."""

from __future__ import annotations

import pytest

from experiments import experiment_config
from experiments.core.config import ConfigError, check_rule


@pytest.mark.parametrize("value,rule,message", [
    ([], "sizes", "k is empty"),
    ([4, 0], "sizes", "k has [0]"),
    ([-1], "sizes0", "k has [-1]"),
    ("yes", "bool", "k='yes' must be true or false"),
    (0, "> 0", "k=0 must be a number > 0"),
    (float("nan"), ">= 0", "k=nan must be a number >= 0"),
    (True, "> 0", "k=True must be a number > 0"),
    (2.5, "int >= 1", "k=2.5 must be an integer >= 1"),
    (4, "int >= 6", "k=4 must be an integer >= 6"),
    (["copy", "tirad"], ("copy", "triad"), "k=['copy', 'tirad']; allowed: a non-empty list of "
                                           "copy, triad"),
    ([], {"copy": 1}, "k=[]; allowed"),
])
def test_a_rule_refuses_a_bad_value(value, rule, message):
    with pytest.raises(ConfigError) as exc:
        check_rule("k", value, rule)
    assert message in str(exc.value)


@pytest.mark.parametrize("value,rule", [([1, 2], "sizes"), ([0], "sizes0"), (False, "bool"),
                                        (1e-9, "> 0"), (float("inf"), "> 0"), (0, ">= 0"),
                                        (6, "int >= 6"),
                                        (["triad"], ("copy", "triad"))])
def test_a_rule_lets_a_good_value_through(value, rule):
    check_rule("k", value, rule)


def test_an_experiment_config_checks_its_rules_when_built():
    with pytest.raises(ConfigError, match=r"experiment.max_call_s=0.0 must be a number > 0"):
        experiment_config("matmul", max_call_s=0)
    with pytest.raises(ConfigError, match=r"experiment.ops=\['gemv'\]; allowed"):
        experiment_config("decode", ops=["gemv"])
