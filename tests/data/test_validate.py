"""Validation rules, one case each, against hand-made books."""

from __future__ import annotations

import numpy as np

from lobsurf.data.schema import UNDEF_PRICE
from lobsurf.data.validate import ValidationState, infer_tick_fixed, validate_chunk
from tests.conftest import TICK_FIXED, random_walk_books


def test_clean_books_all_kept():
    chunk = random_walk_books(500, seed=3)
    keep, counts = validate_chunk(chunk, ValidationState(), TICK_FIXED)
    assert keep.all() and sum(counts.values()) == 0


def test_each_reason_counted_once_in_priority_order():
    c = random_walk_books(9, seed=4)
    c.bid_px[0, :] = UNDEF_PRICE; c.ask_px[0, :] = UNDEF_PRICE          # empty
    c.bid_sz[0] = 0; c.ask_sz[0] = 0
    c.ask_px[1, :] = UNDEF_PRICE; c.ask_sz[1] = 0                       # one-sided
    c.bid_px[2, 0] = c.ask_px[2, 0] + TICK_FIXED                        # crossed
    c.bid_px[3, 0] = c.ask_px[3, 0]                                      # locked
    c.bid_px[4, 5] = c.bid_px[4, 4]                                      # not strictly falling
    c.ask_px[5, 7] = UNDEF_PRICE                                         # UNDEF with size > 0
    c.bid_px[6, 2] += 1                                                  # off the tick grid
    c.ts_recv_ns[7] = c.ts_recv_ns[6] - 1                                # time goes backwards
    keep, counts = validate_chunk(c, ValidationState(), TICK_FIXED)
    assert keep.tolist() == [False] * 8 + [True]
    assert counts == {"empty_book": 1, "one_sided_book": 1, "crossed_book": 1, "locked_book": 1,
                      "malformed_levels": 2, "off_tick": 1, "ts_backwards": 1}


def test_partial_book_is_valid_and_gap_is_not():
    c = random_walk_books(2, seed=5)
    c.bid_px[:, 4:] = UNDEF_PRICE; c.bid_sz[:, 4:] = 0                  # 4 bid levels: fine
    c.ask_px[1, 3] = UNDEF_PRICE; c.ask_sz[1, 3] = 0                    # hole at level 3: not
    keep, counts = validate_chunk(c, ValidationState())
    assert keep.tolist() == [True, False] and counts["malformed_levels"] == 1


def test_time_order_carries_across_chunks():
    c = random_walk_books(10, seed=6)
    state = ValidationState()
    validate_chunk(c.take(np.arange(5, 10)), state)
    keep, counts = validate_chunk(c.take(np.arange(0, 5)), state)
    assert not keep.any() and counts["ts_backwards"] == 5


def test_tick_inference():
    c = random_walk_books(300, seed=7)
    assert infer_tick_fixed(c) == TICK_FIXED
    assert infer_tick_fixed(c, current=TICK_FIXED // 5) == TICK_FIXED // 5


def test_tick_inference_sees_a_price_off_the_sampled_grid():
    c = random_walk_books(300, seed=8)
    c.bid_px[3, 7] -= TICK_FIXED // 2  # row 3 is not sampled; level 7 is not the top
    assert infer_tick_fixed(c) == TICK_FIXED // 2


def test_defined_level_of_size_zero_and_extreme_prices_are_malformed():
    c = random_walk_books(4, seed=9)
    c.bid_sz[0, 3] = 0                                                   # a ghost order
    c.ask_px[1, 1] = np.iinfo(np.int64).min                              # diff would wrap
    c.ask_px[1, 2:] = UNDEF_PRICE; c.ask_sz[1, 2:] = 0
    c.bid_px[2, 0] = np.iinfo(np.int64).max - 1                          # crossed, not wrapped
    keep, counts = validate_chunk(c, ValidationState())
    assert keep.tolist() == [False, False, False, True]
    assert counts["malformed_levels"] == 2 and counts["crossed_book"] == 1
