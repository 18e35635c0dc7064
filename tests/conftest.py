"""Shared fixtures: paths to shipped test data."""

import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(REPO, "testdata")


@pytest.fixture
def testdata():
    return TESTDATA
