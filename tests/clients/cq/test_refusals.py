"""Every query the CQ parser refuses, and where it says the problem is.

Each limit is tested at exactly the limit (accepted) and one over
(refused, with the line and column of the thing over the limit).
"""

import pytest

from clients.cq import (
    MAX_COMPARISONS,
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_PATH_SEGMENTS,
    MAX_QUERY_CHARS,
    MAX_STRING_CHARS,
    QueryError,
    parse_query,
)


def parse(query, region="orders"):
    return parse_query(query, region=region)


def refused(query, region="orders"):
    with pytest.raises(QueryError) as info:
        parse(query, region)
    return info.value


def assert_refused(query, line, column, reason, region="orders"):
    error = refused(query, region)
    assert (error.line, error.column) == (line, column), str(error)
    assert reason in error.reason
    assert str(error) == f"line {line}, column {column}: {error.reason}"


def test_the_limits_are_those_of_the_contract():
    assert (MAX_QUERY_CHARS, MAX_COMPARISONS, MAX_NESTING) == (4096, 64, 32)
    assert (MAX_IN_ITEMS, MAX_PATH_SEGMENTS, MAX_STRING_CHARS) == (64, 16, 512)


# -- query length -------------------------------------------------------------


def test_a_query_of_exactly_4096_characters_is_accepted():
    query = "value.a" + " " * (4096 - len("value.a"))
    assert len(query) == 4096
    parse(query)


def test_a_query_of_4097_characters_is_refused_at_its_4097th():
    query = "value.a" + " " * (4097 - len("value.a"))
    assert_refused(query, 1, 4097, "longer than 4096 characters")


def test_the_length_refusal_counts_lines():
    query = "value.a\n" + " " * 5000
    assert_refused(query, 2, 4097 - 8, "longer than 4096 characters")


def test_the_length_counts_characters_not_bytes():
    parse("value.a = '" + "é" * 500 + "'" + " " * (4096 - 512))


# -- comparisons --------------------------------------------------------------


def chain(count, form="value.a = 1", joiner=" AND "):
    return joiner.join([form] * count)


@pytest.mark.parametrize(
    "form",
    [
        "value.a = 1",
        "value.a IN (1, 2)",
        "key LIKE 'a%'",
        "value.a IS NULL",
        "value.a",
        "true",
        "value.a NOT IN (1)",
        "value.a IS NOT NULL",
    ],
)
def test_64_comparisons_are_accepted_and_65_refused(form):
    parse(chain(64, form))
    column = len(chain(64, form)) + len(" AND ") + 1
    assert_refused(chain(65, form), 1, column, "more than 64 comparisons")


def test_an_or_chain_counts_comparisons_too():
    parse(chain(64, joiner=" OR "))
    assert_refused(chain(65, joiner=" OR "), 1, 64 * 15 + 1, "more than 64")


def test_comparisons_are_counted_across_parentheses_and_lines():
    query = " AND\n".join(f"(value.a = {i} OR value.b = {i})" for i in range(32))
    parse(query)
    assert_refused(query + "\nAND value.c = 1", 33, 5, "more than 64 comparisons")


def test_a_long_flat_chain_parses_without_deep_recursion():
    parse(chain(64, "value.a"))  # the 65 comparisons above fail on the count


# -- nesting ------------------------------------------------------------------


def test_32_nested_parentheses_are_accepted_and_33_refused():
    parse("(" * 32 + "value.a" + ")" * 32)
    assert_refused("(" * 33 + "value.a" + ")" * 33, 1, 33, "nested deeper than 32")


def test_32_nots_are_accepted_and_33_refused():
    parse("NOT " * 32 + "value.a")
    assert_refused("NOT " * 33 + "value.a", 1, 32 * 4 + 1, "nested deeper than 32")


def test_not_and_parentheses_count_together():
    parse("NOT (" * 16 + "value.a" + ")" * 16)
    assert_refused(
        "NOT (" * 16 + "NOT value.a" + ")" * 16, 1, 16 * 5 + 1, "nested deeper"
    )


def test_sibling_parentheses_are_not_nesting():
    group = "(" * 32 + "value.a" + ")" * 32
    parse(f"{group} AND {group} OR {group}")


def test_negated_operators_and_in_lists_are_not_nesting():
    parse("NOT (" * 16 + "value.a NOT IN (1) AND value.b NOT LIKE 'x'" + ")" * 16)
    parse("(" * 32 + "value.a IS NOT NULL" + ")" * 32)


def test_deep_nesting_is_refused_without_recursion_error():
    assert_refused("(" * 2000 + "value.a" + ")" * 2000, 1, 33, "nested deeper")
    assert_refused("NOT " * 1000, 1, 32 * 4 + 1, "nested deeper")


# -- IN lists -----------------------------------------------------------------


def in_list(count):
    return "value.a IN (" + ", ".join(str(i) for i in range(count)) + ")"


def test_an_in_list_of_64_items_is_accepted_and_65_refused():
    parse(in_list(64))
    column = len(in_list(64)) - 1 + len(", ") + 1
    assert_refused(in_list(65), 1, column, "more than 64 items")


# -- paths --------------------------------------------------------------------


def test_a_path_of_16_segments_is_accepted_and_17_refused():
    parse("value" + ".a" * 16)
    assert_refused("value" + ".a" * 17, 1, 6 + 16 * 2, "more than 16 segments")


def test_bracket_segments_count_as_segments():
    parse("value" + "[0]" * 8 + "['a']" * 8)
    assert_refused("value" + "[0]" * 17, 1, 6 + 16 * 3, "more than 16 segments")


# -- string literals ----------------------------------------------------------


def test_a_string_of_512_characters_is_accepted_and_513_refused():
    parse("value = '" + "x" * 512 + "'")
    assert_refused("value = '" + "x" * 513 + "'", 1, 9, "longer than 512")


def test_string_length_counts_after_unescaping():
    parse("value = '" + "''" * 512 + "'")
    assert_refused("value = '" + "''" * 513 + "'", 1, 9, "longer than 512")


def test_like_patterns_and_bracket_members_share_the_string_limit():
    parse("key LIKE '" + "%" * 512 + "'")
    assert_refused("key LIKE '" + "%" * 513 + "'", 1, 10, "longer than 512")
    parse("value['" + "m" * 512 + "']")
    assert_refused("value['" + "m" * 513 + "']", 1, 7, "longer than 512")


# -- what the language does not have ------------------------------------------


@pytest.mark.parametrize(
    ("query", "column", "reason"),
    [
        ("SELECT DISTINCT * FROM /orders WHERE true", 8, "DISTINCT is not supported"),
        ("SELECT value FROM /orders WHERE true", 8, "only SELECT *"),
        ("SELECT key, value FROM /orders WHERE true", 8, "only SELECT *"),
        ("SELECT o.qty FROM /orders o WHERE true", 8, "only SELECT *"),
        ("SELECT COUNT(*) FROM /orders WHERE true", 8, "aggregates"),
        ("SELECT * FROM /orders WHERE true ORDER BY key", 34, "ORDER BY"),
        ("value.a ORDER BY key", 9, "ORDER BY is not supported"),
        ("value.a GROUP BY value.b", 9, "GROUP BY is not supported"),
        ("value.a LIMIT 10", 9, "LIMIT is not supported"),
        ("SELECT * FROM /orders LIMIT 1", 23, "LIMIT is not supported"),
        ("value.a HAVING true", 9, "HAVING is not supported"),
        ("value.a UNION value.b", 9, "UNION is not supported"),
        ("count(value) > 1", 1, "aggregates are not supported"),
        ("SUM(value.n) > 1", 1, "aggregates are not supported"),
        ("length(key) > 1", 1, "functions are not supported"),
        ("__import__('os')", 1, "functions are not supported"),
        ("value.name.startsWith('a')", 12, "methods are not supported"),
        ("SELECT * FROM /orders o, /orders p WHERE true", 24, "one region"),
        ("SELECT * FROM /orders, /other WHERE true", 22, "one region"),
        ("SELECT * FROM /orders o JOIN /other p WHERE true", 25, "joins"),
        ("SELECT * FROM /orders AS o WHERE o.a", 23, "AS is not supported"),
        ("value.a = $1", 11, "bind parameters"),
        ("value.a = ?", 11, "bind parameters"),
        ("value.a = :x", 11, "bind parameters"),
        ('value.a = "x"', 11, "double quotes"),
        ("value.a = `x`", 11, "unexpected character '`'"),
        ("`value`.a", 1, "unexpected character '`'"),
        ("value.a = 1; DROP TABLE x", 12, "unexpected character ';'"),
        ("value.a = 1 -- comment", 13, "unexpected character '-'"),
        ("value.a = 1 + 2", 13, "unexpected character '+'"),
        ("value.a\u00a0= 1", 8, "U+00A0"),
        ("value.a ! = 1", 9, "'!'"),
        ("value.a & 1", 9, "'&'"),
        ("value.a = 1 # x", 13, "'#'"),
        ("value.a = {}", 11, "'{'"),
    ],
)
def test_what_the_language_does_not_have_is_refused(query, column, reason):
    assert_refused(query, 1, column, reason)


# -- FROM ---------------------------------------------------------------------


def test_the_region_must_be_the_cqs_region():
    assert_refused(
        "SELECT * FROM /other WHERE true", 1, 15, "reads region /other", "orders"
    )


def test_the_region_is_case_sensitive():
    assert_refused("SELECT * FROM /Orders WHERE true", 1, 15, "region /Orders")


def test_the_region_must_start_with_a_slash():
    assert_refused("SELECT * FROM orders WHERE true", 1, 15, "expected /REGION")


def test_a_slash_needs_a_region_name():
    assert_refused("SELECT * FROM / WHERE true", 1, 15, "region name after '/'")


def test_a_sub_region_path_is_refused():
    assert_refused("SELECT * FROM /orders/x WHERE true", 1, 22, "expected WHERE")


def test_the_where_clause_is_required():
    assert_refused("SELECT * FROM /orders", 1, 22, "expected WHERE")
    assert_refused("SELECT * FROM /orders o", 1, 24, "expected WHERE")
    assert_refused("SELECT * FROM /orders WHERE", 1, 28, "expected a path")


def test_select_needs_star_and_from():
    assert_refused("SELECT", 1, 7, "only SELECT *")
    assert_refused("SELECT *", 1, 9, "expected FROM")
    assert_refused("SELECT * WHERE true", 1, 10, "expected FROM")


def test_the_alias_may_not_be_key():
    assert_refused("SELECT * FROM /orders key WHERE key = 'a'", 1, 23, "'key'")


def test_the_alias_is_case_sensitive():
    assert_refused(
        "SELECT * FROM /orders o WHERE O.a", 1, 31, "starts with key, value or o"
    )


def test_a_bare_condition_has_no_alias():
    assert_refused("o.a = 1", 1, 1, "unknown name 'o': a path starts with key or value")


# -- operands and paths -------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "column", "reason"),
    [
        ("", 1, "expected a path or a literal, found the end"),
        ("   ", 4, "expected a path or a literal"),
        ("VALUE.a", 1, "unknown name 'VALUE'"),
        ("Key = 'a'", 1, "unknown name 'Key'"),
        ("qty > 5", 1, "unknown name 'qty'"),
        ("key.a = 1", 4, "key is a string"),
        ("key[0] = 1", 4, "key is a string"),
        ("value.0 = 1", 7, "write [0] for an array index"),
        ("value.", 7, "a member name after '.'"),
        ("value.'a' = 1", 7, "a member name after '.'"),
        ("value[-1] = 1", 7, "may not be negative"),
        ("value[1.5] = 1", 7, "an array index"),
        ("value[true] = 1", 7, "an array index"),
        ("value[key] = 1", 7, "an array index"),
        ("value[0 = 1", 9, "expected ']'"),
        ("5", 1, "a number literal is not a condition"),
        ("'x'", 1, "a string literal is not a condition"),
        ("null", 1, "a null literal is not a condition"),
        ("value.a = WHERE", 11, "expected a path or a literal, found 'WHERE'"),
        ("AND value.a", 1, "expected a path or a literal, found 'AND'"),
    ],
)
def test_bad_operands_are_refused(query, column, reason):
    assert_refused(query, 1, column, reason)


# -- numbers and strings ------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "column", "reason"),
    [
        ("07", 9, "may not start with 0"),
        ("-01", 9, "may not start with 0"),
        ("1.", 9, "decimal point must be followed by digits"),
        ("1.e5", 9, "decimal point must be followed by digits"),
        (".5", 9, "expected a path or a literal, found '.'"),
        ("1e", 9, "exponent must have digits"),
        ("1e+", 9, "exponent must have digits"),
        ("+1", 9, "unexpected character '+'"),
        ("- 1", 9, "unexpected character '-'"),
        ("5abc", 9, "malformed number"),
        ("1.5.2", 9, "malformed number"),
        ("1e999", 9, "number out of range"),
        ("-1e999", 9, "number out of range"),
        ("'open", 9, "unterminated string literal"),
        ("'it''s", 9, "unterminated string literal"),
    ],
)
def test_bad_literals_are_refused(literal, column, reason):
    assert_refused(f"value = {literal}", 1, column, reason)


# -- the rest of the grammar --------------------------------------------------


@pytest.mark.parametrize(
    ("query", "column", "reason"),
    [
        ("value.a = ", 11, "found the end of the query"),
        ("value.a = = 1", 11, "found '='"),
        ("value.a == 1", 10, "found '='"),
        ("value.a 1", 9, "AND, OR or the end of the query"),
        ("value.a AND", 12, "expected a path or a literal"),
        ("value.a OR OR value.b", 12, "found 'OR'"),
        ("(value.a", 9, "expected ')'"),
        ("value.a)", 8, "unmatched ')'"),
        ("()", 2, "expected a path or a literal"),
        ("value.a NOT = 1", 13, "IN or LIKE after NOT"),
        ("value.a NOT NULL", 13, "IN or LIKE after NOT"),
        ("value.a IN ()", 13, "at least one literal"),
        ("value.a IN 1", 12, "'(' and a list of literals"),
        ("value.a IN (1,)", 15, "expected a path or a literal"),
        ("value.a IN (1 2)", 15, "',' or ')'"),
        ("value.a IN (1", 14, "',' or ')'"),
        ("value.a IN (value.b)", 13, "literals only"),
        ("value.a LIKE 5", 14, "'pattern' string literal"),
        ("value.a LIKE value.b", 14, "'pattern' string literal"),
        ("value.a LIKE 'x\\'", 14, "may not end with a lone \\"),
        ("value.a IS 5", 12, "NULL after IS"),
        ("value.a IS NOT true", 16, "NULL after IS NOT"),
        ("value.a IS", 11, "NULL after IS"),
        ("value.a = 1 value.b = 2", 13, "AND, OR or the end"),
        ("value.a value.b", 9, "AND, OR or the end"),
    ],
)
def test_syntax_errors_are_refused(query, column, reason):
    assert_refused(query, 1, column, reason)


def test_errors_give_the_line_and_column_across_lines():
    assert_refused("value.a = 1\nAND\n   value.b = = 2", 3, 14, "found '='")
    assert_refused("SELECT *\n FROM /orders\n WHERE\n  value.a ! 1", 4, 11, "'!'")


def test_a_string_spanning_lines_moves_the_position_of_what_follows():
    assert_refused("value.a = 'one\ntwo' $", 2, 6, "bind parameters")


def test_an_unterminated_string_is_reported_where_it_opens():
    assert_refused("value.a = 1 AND\n  value.b = 'x\n\n", 2, 13, "unterminated")


def test_columns_count_characters_not_bytes():
    assert_refused("value['ünï'] = 1 $", 1, 18, "bind parameters")


def test_a_query_that_is_not_a_string_is_refused():
    error = refused(None)
    assert (error.line, error.column) == (1, 1)
