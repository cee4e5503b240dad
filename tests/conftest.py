import pytest

from oracle.checkpoint import build_model


@pytest.fixture(scope="session")
def tiny():
    return build_model("tiny", seed=0)
