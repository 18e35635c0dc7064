"""The address-space limit is checked before a placement maps memory (core/limits.py)."""

import resource

import pytest

from tf_autoplace.core import limits
from tf_autoplace.errors import ConfigError


def _mapped() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def _limit(monkeypatch, room: int) -> None:
    """Make the process look limited to what it maps now plus ``room`` bytes (the real limit
    is not touched: the test process must not run out of memory)."""
    soft = _mapped() + room
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, soft))


def test_no_limit_checks_nothing():
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert limits.address_space_left() is None
    limits.check_address_space()  # this process can place graphs


def test_a_limit_with_little_room_is_a_config_error_naming_ulimit(monkeypatch):
    _limit(monkeypatch, 50 * 2**20)
    assert 0 < limits.address_space_left() <= 50 * 2**20 + 2**20
    with pytest.raises(ConfigError, match=r"may map only .* MB more memory under its "
                                          r"address-space limit \(ulimit -v\).*at least 268 MB"):
        limits.check_address_space()
    _limit(monkeypatch, 2 * 2**30)  # room enough
    limits.check_address_space()
