import numpy as np
import pytest

from oracle.kv import KVCache, KVError


def kvc():
    return KVCache(num_layers=2, num_depths=3, num_kv_heads=1, head_dim=2)


def test_write_read_rollback():
    kv = kvc()
    with pytest.raises(KVError, match="depth 2 layer 0: plane never written"):
        kv.read("r", 2, 0, 0)
    for p in range(5):
        for j in range(3):
            for l in range(2):
                kv.write("r", p, j, l, np.full((1, 2), p), np.full((1, 2), -p), call=p)
    K, V = kv.read("r", 1, 0, 3)
    assert K.shape == (4, 1, 2) and K[3, 0, 0] == 3 and V[2, 0, 1] == -2
    assert [w.call for w in kv.log[::6]] == [0, 1, 2, 3, 4]
    with pytest.raises(KVError, match="position 5 depth 1 layer 0: never written"):
        kv.read("r", 1, 0, 5)
    kv.truncate("r", 3)
    with pytest.raises(KVError, match="request r position 3 depth 1 layer 0: never written or rolled back"):
        kv.read("r", 1, 0, 3)
    assert kv.frontiers("r") == {3}
    kv.write("r", 3, 1, 0, np.zeros((1, 2)), np.zeros((1, 2)), call=9)  # rewrite after rollback
    assert kv.read("r", 1, 0, 3)[0][3, 0, 0] == 0


def test_write_must_append_at_frontier():
    kv = kvc()
    with pytest.raises(KVError, match="position 2 depth 0 layer 1 .call 7.: the plane's frontier is 0"):
        kv.write("r", 2, 0, 1, np.zeros((1, 2)), np.zeros((1, 2)), call=7)
    with pytest.raises(KVError, match="outside 3 depths"):
        kv.write("r", 0, 3, 0, np.zeros((1, 2)), np.zeros((1, 2)), call=0)


def test_truncate_beyond_frontier_raises():
    kv = kvc()
    kv.write("r", 0, 0, 0, np.zeros((1, 2)), np.zeros((1, 2)), call=0)
    with pytest.raises(KVError, match="holds only"):
        kv.truncate("r", 2)
    with pytest.raises(KVError, match="negative"):
        kv.truncate("r", -1)


def test_growth_keeps_values():
    kv = kvc()
    for p in range(40):
        kv.write(0, p, 0, 0, np.full((1, 2), p), np.full((1, 2), p), call=0)
    K, _ = kv.read(0, 0, 0, 39)
    assert np.array_equal(K[:, 0, 0], np.arange(40))
