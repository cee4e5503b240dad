import pytest

from oracle.model import build_model


@pytest.fixture(scope="session")
def tiny():
    return build_model("tiny", seed=0)
