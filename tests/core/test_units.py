"""Byte amounts in messages are written in the unit that fits them."""

import pytest

from tf_autoplace.core.units import format_bytes


@pytest.mark.parametrize("n,text", [
    (0, "0 B"), (512, "512 B"), (999, "999 B"), (1000, "1.00 KB"), (12_000, "12.0 KB"),
    (999_960, "1.00 MB"), (1_500_000, "1.50 MB"), (10.7e9, "10.7 GB"), (200e9, "200 GB"),
    (3e12, "3.00 TB"), (-3000, "-3.00 KB")])
def test_bytes_read_in_the_unit_that_fits(n, text):
    assert format_bytes(n) == text
