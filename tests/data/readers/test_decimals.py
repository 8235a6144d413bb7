"""Exact decimal texts: prices and sizes against ``decimal.Decimal``, the strict refusals,
and the size unit's inference and refinement."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lobsurf.data.readers.decimals import (SizeUnit, atoms_of, decimal_text, price_fixed,
                                           size_atoms)

DIGITS = st.text("0123456789", min_size=1, max_size=9)


@settings(max_examples=300, deadline=None)
@given(whole=DIGITS, frac=st.text("0123456789", max_size=12), exp=st.integers(-6, 4) | st.none())
def test_texts_parse_exactly_as_decimal_does(whole, frac, exp):
    text = whole + ("." + frac if frac else "") + ("" if exp is None else f"e{exp}")
    for parse, scale in ((size_atoms, 12), (price_fixed, 9)):
        value = Decimal(text).scaleb(scale)
        try:
            got = parse(text)
        except ValueError:
            # refused only when it does not fit the scale (or a price is not positive)
            assert value != value.to_integral_value() or (scale == 9 and not 0 < value
                                                            < 2**63 - 1)
            continue
        assert got == value and isinstance(got, int)


@pytest.mark.parametrize("text", ["", ".", "1.2.3", "-1", "+1", " 1", "1 ", "1_0", "NaN",
                                  "inf", "0x10", "١٢", "١.٢", "1.٢", "1e", "1e99999", "1,5",
                                  None, 5])
def test_anything_but_a_plain_decimal_is_refused(text):
    with pytest.raises(ValueError):
        size_atoms(text)


def test_prices_beyond_nine_decimals_or_not_positive_are_refused():
    assert price_fixed("61837.63000000") == 61_837_630_000_000
    assert price_fixed("0.000000001") == 1
    for bad in ("0.0000000001", "0", "0.000", "9300000000"):
        with pytest.raises(ValueError):
            price_fixed(bad)


def test_the_size_unit_is_the_gcd_refined_never_coarsened():
    unit = SizeUnit()
    assert unit.observe(size_atoms("0.001")) == 1 and unit.text() == "0.001"
    assert unit.observe(size_atoms("0.003")) == 1 and unit.text() == "0.001"
    assert unit.observe(size_atoms("0.00025")) == 4 and unit.text() == "0.00025"
    assert unit.observe(size_atoms("0.0001")) == 5 and unit.text() == "0.00005"
    assert unit.base == 0.00005 and not unit.given


def test_a_given_unit_refuses_a_size_off_it():
    unit = SizeUnit(atoms_of("0.001"))
    assert unit.observe(size_atoms("0.005")) == 1
    with pytest.raises(ValueError, match="not a whole number of --size-unit 0.001"):
        unit.observe(size_atoms("0.0005"))


def test_user_amounts_are_read_as_typed():
    assert atoms_of(0.00001) == atoms_of("0.00001") == atoms_of("1e-5") == 10_000_000
    assert decimal_text(atoms_of(0.1)) == "0.1" and decimal_text(atoms_of(25)) == "25"
    for bad in ("0", "-1", "1e-13", "abc", float("nan")):
        with pytest.raises(ValueError):
            atoms_of(bad)
