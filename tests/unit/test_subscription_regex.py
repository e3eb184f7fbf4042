"""`subscribed_topic_regex` compiled as Kafka does (RE2J syntax, full match), where RE2 differs from Python's `re`."""

from __future__ import annotations

import pytest

from strata.broker.group.regex import InvalidRegex, compile_subscription_regex


def test_full_match_not_search():
    r = compile_subscription_regex("orders-.*")
    assert r.fullmatch("orders-eu")
    assert r.fullmatch("orders-")
    assert not r.fullmatch("old-orders-eu")  # re.search would find it
    assert not r.fullmatch("orders")
    alt = compile_subscription_regex("a|ab")
    assert alt.fullmatch("ab")  # the whole name, not the leftmost alternative's prefix (re.match would stop at 'a')


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence"),  # backreference
        (r"foo(?=bar)", "invalid perl operator"),  # lookahead
        (r"(?<!x)y", "invalid perl operator"),  # lookbehind
        (r"a++", "bad repetition operator"),  # possessive quantifier (Python 3.11 accepts it)
        (r"[a-", "missing ]"),
        (r"(abc", "missing )"),
        (r"a{1001}", "invalid repetition size"),
    ],
)
def test_rejected_with_a_one_line_reason(pattern, reason):
    with pytest.raises(InvalidRegex) as info:
        compile_subscription_regex(pattern)
    assert reason in str(info.value)
    assert "\n" not in str(info.value)


def test_re2_syntax_python_lacks():
    assert compile_subscription_regex(r"\pL+-\d+").fullmatch("ordres-12")  # Unicode classes
    assert compile_subscription_regex(r"\Qa.b\E").fullmatch("a.b")  # quoted literal
    assert not compile_subscription_regex(r"\Qa.b\E").fullmatch("axb")
    assert compile_subscription_regex("(?i)Orders").fullmatch("ORDERS")


def test_no_catastrophic_backtracking():
    """(a+)+$ on 'aaaa...b' takes exponential time in a backtracking engine (2^40 steps with Python's re); RE2 is
    linear, so a client's pattern cannot stall the coordinator."""
    assert not compile_subscription_regex("(a+)+").fullmatch("a" * 40 + "b")
