"""Exact decimal text -> integers: prices in the store's fixed point, sizes in size atoms.

Crypto venues send prices and quantities as decimal strings ("61837.63000000",
"0.00100000"; Tardis files also "1e-05"). They are parsed as text, never through a float:

* a price becomes an int at 1e-9 of the currency (``FIXED_PRICE_SCALE``, the store's unit);
  more than 9 significant decimals cannot be stored and is an error;
* a size becomes an int of *size atoms*, 1e-12 of the base asset (``SIZE_DECIMALS``). The
  store keeps sizes as integers of the instrument's quantity step, the *size unit*;
  ``SizeUnit`` holds it in atoms: given by the user, or inferred as the greatest common
  divisor of the sizes seen and refined (never coarsened) when a finer size appears.

Errors are ``ValueError`` with a short reason; the readers add the file and line.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from lobsurf.data.schema import FIXED_PRICE_SCALE, UNDEF_PRICE

#: decimals of a size atom: sizes are exact integers of 1e-12 base units while parsed
SIZE_DECIMALS = 12
ATOMS_PER_BASE = 10**SIZE_DECIMALS
PRICE_DECIMALS = 9
assert 10**PRICE_DECIMALS == FIXED_PRICE_SCALE
#: 10 ** (scale - k) for k decimals written: the factor that brings digits to the scale
_PRICE_FACTOR = [10 ** (PRICE_DECIMALS - k) for k in range(PRICE_DECIMALS + 1)]
_SIZE_FACTOR = [10 ** (SIZE_DECIMALS - k) for k in range(SIZE_DECIMALS + 1)]
#: longest text accepted for one number (a sane bound before any int conversion)
MAX_TEXT = 64
#: a plain non-negative decimal with an optional exponent of at most 4 digits
_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?")


def _scaled(text: str, decimals: int, factors: list[int]) -> int:
    """``text`` as an exact int of 10**-decimals; ValueError if it is not a plain
    non-negative decimal (digits, one optional point, an optional exponent) or needs more
    decimals than the scale holds."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a decimal string")
    dot = text.find(".")
    if dot < 0:
        if text.isdigit() and text.isascii():
            return int(text) * factors[0]
    else:
        digits = text[:dot] + text[dot + 1:]
        written = len(text) - dot - 1
        if written <= decimals and digits.isdigit() and digits.isascii():
            return int(digits) * factors[written]
    return _slow(text, decimals)


def _slow(text: str, decimals: int) -> int:
    # Exponents ("1e-05"), trailing zeros beyond the scale and the like: exact via Decimal,
    # after a strict check of the characters (Decimal itself accepts "NaN", "1_0", " 1").
    if len(text) > MAX_TEXT or not _NUMBER.fullmatch(text):
        raise ValueError(f"{text[:MAX_TEXT]!r} is not a decimal number")
    value = Decimal(text).scaleb(decimals)
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} has more than {decimals} decimals")
    return int(value)


def price_fixed(text: str) -> int:
    """A positive decimal price as fixed point (1e-9 units), exactly."""
    value = _scaled(text, PRICE_DECIMALS, _PRICE_FACTOR)
    if not 0 < value < UNDEF_PRICE:
        raise ValueError(f"price {text!r} is out of range (must be > 0 and < 9.2e9)")
    return value


def size_atoms(text: str) -> int:
    """A non-negative decimal size as size atoms (1e-12 base units), exactly."""
    return _scaled(text, SIZE_DECIMALS, _SIZE_FACTOR)


def atoms_of(amount: str | float | Decimal) -> int:
    """A base-asset amount given by a user (``--size-unit 0.00001``) as atoms; ValueError
    unless it is positive and a whole number of atoms. A float is read through its
    shortest text (``repr``), the decimal a user typed."""
    text = repr(amount) if isinstance(amount, float) else str(amount)
    try:
        value = Decimal(text).scaleb(SIZE_DECIMALS)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a number") from None
    if not value.is_finite() or value <= 0 or value != value.to_integral_value():
        raise ValueError(f"{text} must be > 0 with at most {SIZE_DECIMALS} decimals")
    return int(value)


def decimal_text(atoms: int) -> str:
    """Atoms as a plain decimal of the base asset: 10_000_000 -> '0.00001'."""
    text = format(Decimal(atoms).scaleb(-SIZE_DECIMALS), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


class SizeUnit:
    """The size unit of one instrument, in atoms: given, or the gcd of the sizes seen.

    ``atoms`` is 0 until something is seen (inferred). ``observe(g)`` folds in a gcd of
    sizes and returns the factor by which sizes already stored in the old unit must be
    multiplied (1: unchanged). With a given unit, a size off it is an error.
    """

    def __init__(self, given_atoms: int | None = None):
        self.given = given_atoms is not None
        self.atoms = given_atoms or 0

    def observe(self, gcd_atoms: int) -> int:
        if gcd_atoms == 0 or (self.atoms and gcd_atoms % self.atoms == 0):
            return 1
        if self.given:
            raise ValueError(f"a size of {decimal_text(gcd_atoms)} (or a gcd of sizes) is not "
                             f"a whole number of --size-unit {decimal_text(self.atoms)}")
        old, self.atoms = self.atoms, math.gcd(self.atoms, gcd_atoms)
        return old // self.atoms if old else 1

    @property
    def base(self) -> float:
        """The unit in base-asset amount (1.0 while nothing was seen)."""
        return float(Decimal(self.atoms or ATOMS_PER_BASE).scaleb(-SIZE_DECIMALS))

    def text(self) -> str:
        return decimal_text(self.atoms or ATOMS_PER_BASE)

