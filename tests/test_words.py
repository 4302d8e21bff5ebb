"""The one pluraliser (core/words.py): a count of 1 takes the noun as given, any other count its plural."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.core.words import plural

REGULAR = [("rank", "ranks"), ("pass", "passes"), ("entry", "entries"), ("day", "days"),
           ("micro-batch", "micro-batches"), ("box", "boxes"), ("wrong element", "wrong elements"),
           ("process group", "process groups")]


@pytest.mark.parametrize("noun, many", REGULAR)
def test_a_noun_takes_its_regular_plural_on_its_last_word(noun, many):
    assert plural(1, noun) == f"1 {noun}"
    assert plural(0, noun) == f"0 {many}"
    assert plural(3, noun) == f"3 {many}"


def test_an_irregular_plural_is_given():
    assert plural(2, "child", "children") == "2 children" and plural(1, "child", "children") == "1 child"


@given(st.integers(min_value=-10, max_value=10**9), st.from_regex(r"[a-z]{1,12}", fullmatch=True))
def test_only_a_count_of_one_keeps_the_noun_as_it_is(count, noun):
    count_text, word = plural(count, noun).split(" ")
    assert count_text == str(count)
    assert (word == noun) == (count == 1)
    assert word.startswith(noun[:-1])
