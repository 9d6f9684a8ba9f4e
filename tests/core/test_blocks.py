import pytest

from preheat.core.blocks import ROOT_HASH, block_hash, block_hashes


def test_full_blocks_only_and_chained():
    tokens = list(range(40))
    hs = block_hashes(tokens, 16)
    assert len(hs) == 2  # 40 tokens = 2 full blocks of 16 + a partial tail
    assert hs[0] == block_hash(ROOT_HASH, tokens[:16])
    assert hs[1] == block_hash(hs[0], tokens[16:32])


def test_shared_prefix_shares_blocks_until_divergence():
    a = list(range(64))
    b = [*range(20), 999, *range(21, 64)]
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert ha[0] == hb[0]
    # a block after the divergence differs even though its own tokens are equal (chaining)
    assert ha[1:] != hb[1:]
    assert ha[2] != hb[2]


def test_hash_is_stable_across_processes():
    # a literal pins the hash function: routers and workers must agree forever
    assert block_hash(ROOT_HASH, [1, 2, 3, 4]) == block_hash(0, (1, 2, 3, 4))
    assert block_hash(ROOT_HASH, [1, 2, 3, 4]) == 0x0922_2804_E3E3_9BA2


def test_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        block_hashes([1, 2], 0)


def test_block_hashes_equal_chaining_block_hash_by_hand() -> None:
    tokens = [(i * 7919) % 50_000 for i in range(100)]
    parent, want = ROOT_HASH, []
    for start in range(0, 96, 16):
        parent = block_hash(parent, tokens[start : start + 16])
        want.append(parent)
    assert block_hashes(tokens, 16) == want
    assert block_hashes(tokens[:15], 16) == []
