"""The LIKE matcher: ``%`` any run, ``_`` one character, ``\\`` escapes."""

import pytest

from clients.cq.like import check_pattern, compile_like


def like(pattern, value):
    assert check_pattern(pattern) is None
    return compile_like(pattern)(value)


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("abc", "abc", True),
        ("abc", "abcd", False),
        ("abc", "ab", False),
        ("abc", "ABC", False),
        ("", "", True),
        ("", "a", False),
        ("%", "", True),
        ("%", "anything at all", True),
        ("%%", "", True),
        ("a%", "a", True),
        ("a%", "abc", True),
        ("a%", "ba", False),
        ("%c", "abc", True),
        ("%c", "cb", False),
        ("%b%", "abc", True),
        ("%b%", "ac", False),
        ("a%c", "ac", True),
        ("a%c", "abbbc", True),
        ("a%c", "abcb", False),
        ("%a%a%", "aa", True),
        ("%a%a%", "a", False),
        ("a%a", "a", False),
        ("ab%bc", "abc", False),
        ("ab%bc", "abbc", True),
        ("_", "a", True),
        ("_", "", False),
        ("_", "ab", False),
        ("___", "abc", True),
        ("a_c", "abc", True),
        ("a_c", "ac", False),
        ("a_c", "abbc", False),
        ("%_", "", False),
        ("%_", "x", True),
        ("_%_", "x", False),
        ("_%_", "xy", True),
        ("%a_c%", "zzabczz", True),
        ("%a_c%", "zzabzcz", False),
        ("%a_c", "aacabc", True),
        ("%a_a%", "aaa", True),
        ("%x_y_z%", "xxayaz", True),
        ("%x_y_z%", "xayazx", True),
        ("%x_y_z%", "xayaz", True),
        ("%x_y_z%", "xaybbz", False),
        ("%_b_%", "abc", True),
        ("%_b_%", "bc", False),
    ],
)
def test_wildcards_match_the_whole_string(pattern, value, expected):
    assert like(pattern, value) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("100\\%", "100%", True),
        ("100\\%", "1000", False),
        ("a\\_b", "a_b", True),
        ("a\\_b", "axb", False),
        ("a\\\\b", "a\\b", True),
        ("a\\\\%", "a\\anything", True),
        ("\\a\\b", "ab", True),
        ("%\\%%", "50% off", True),
        ("%\\%%", "50 off", False),
        ("\\%%", "%", True),
        ("\\'", "'", True),
    ],
)
def test_a_backslash_makes_the_next_character_literal(pattern, value, expected):
    assert like(pattern, value) is expected


def test_a_trailing_lone_backslash_is_not_a_pattern():
    assert check_pattern("abc\\") is not None
    assert check_pattern("abc\\\\") is None


def test_matching_is_case_sensitive_and_counts_code_points():
    assert like("straße", "straße")
    assert not like("STRASSE", "straße")
    assert like("_", "😀")
    assert like("a_c", "a☃c")
    assert like("%é%", "café au lait")
    assert not like("%É%", "café")


def test_line_breaks_are_ordinary_characters():
    assert like("a_b", "a\nb")
    assert like("a%b", "a\n\n\nb")


def test_pathological_patterns_run_without_backtracking():
    long = "a" * 200_000
    assert not like("%a%a%a%a%a%b", long)
    assert like("%a%a%a%a%a%a", long)
    assert not like("%a_a_a_a_a_b%", long)
    assert not like("%" + "a_" * 200 + "b", long)
    assert like("%" + "_" * 500 + "%", long)
    assert not like("a%" * 200 + "b", long)


def test_a_long_value_is_matched_to_its_end():
    assert like("%needle", "x" * 100_000 + "needle")
    assert like("%n_edle%", "x" * 100_000 + "needle" + "y")
    assert not like("%n_edle", "x" * 100_000 + "needle" + "y")
