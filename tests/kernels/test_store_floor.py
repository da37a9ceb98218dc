"""The benchmark's store floor writes exactly the cache bytes the fused FP8
write addresses (Triton interpreter on the CPU; on a GPU, the device)."""

import pytest
import torch

from sglang_kv5d.bench import store_floor
from sglang_kv5d.kernels import fp8_write
from sglang_kv5d.kernels.fp8_reference import addressed_masks, loc_pattern, make_caches

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_plan_slots_finds_complete_aligned_groups_only():
    loc = torch.tensor(
        list(range(32, 48))  # a complete aligned group
        + list(range(65, 81))  # 16 consecutive slots across two groups: neither complete
        + [100, -1, 5000, 100]  # a loose slot twice, a skip, one past the cache
        + [128 + i for i in (3, 0, 2, 1, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12)]  # complete, shuffled
    )
    p = store_floor.plan_slots(loc, n_slots=4096)
    assert p.leaders.tolist() == [32, 128]
    assert p.loose.tolist() == list(range(65, 81)) + [100]
    assert p.slots.tolist() == sorted(set(range(32, 48)) | set(range(65, 81)) | {100} | set(range(128, 144)))
    empty = store_floor.plan_slots(torch.tensor([-1, -3], dtype=torch.int32), n_slots=64)
    assert empty.slots.numel() == empty.leaders.numel() == empty.loose.numel() == 0


@pytest.mark.parametrize("layout", ["5d", "nhd"])
@pytest.mark.parametrize("kind,T", [("runs", 150), ("scattered", 37), ("mixed", 90), ("tricky", 70)])
@pytest.mark.parametrize("H,DK,DV", [(2, 32, 32), (1, 64, 48)])
@pytest.mark.parametrize("block_s", [1, 4, 16])
def test_floor_writes_exactly_the_addressed_bytes(layout, kind, T, H, DK, DV, block_s):
    if layout == "nhd" and DK != DV:
        DV = DK
    page, n_blocks = 32, 12
    gen = torch.Generator().manual_seed(T * 31 + H + DK + DV)
    kc, vc = make_caches(layout, n_blocks, page, H, DK, DV, gen=gen)
    loc = loc_pattern(kind, T, n_blocks * page, page, gen=gen)
    km, vm = addressed_masks(layout, tuple(kc.shape), tuple(vc.shape), loc, H, DK, DV)
    k0, v0 = kc.clone(), vc.clone()
    kc, vc, loc_d = kc.to(DEVICE), vc.to(DEVICE), loc.to(DEVICE)
    floor = store_floor.StoreFloor(kc, vc, loc_d, block_s=block_s)
    floor()
    kc, vc = kc.cpu(), vc.cpu()
    assert bool((kc[km] == store_floor._CODE).all()) and bool((vc[vm] == store_floor._CODE).all())
    assert torch.equal(kc[~km], k0[~km]) and torch.equal(vc[~vm], v0[~vm])
    if layout == "5d" and kind == "runs":
        assert floor.plan.leaders.numel() > 0  # the vector-group programs ran


def test_floor_is_a_no_op_without_valid_slots_and_checks_shapes():
    gen = torch.Generator().manual_seed(1)
    kc, vc = make_caches("5d", 2, 32, 1, 32, 32, gen=gen)
    k0, v0 = kc.clone(), vc.clone()
    store_floor.StoreFloor(kc, vc, torch.tensor([-1, 64, 99]))()
    assert torch.equal(kc, k0) and torch.equal(vc, v0)
    with pytest.raises(ValueError, match="do not match"):
        store_floor.StoreFloor(kc, vc[:, :, :1].contiguous(), torch.tensor([0]))
    with pytest.raises(ValueError, match="NHD"):
        store_floor.StoreFloor(kc.view(-1), vc.view(-1), torch.tensor([0]))
    with pytest.raises(ValueError, match="block_s"):
        store_floor.StoreFloor(kc, vc, torch.tensor([0]), block_s=8)
    with pytest.raises(ValueError, match="contiguous"):
        store_floor.StoreFloor(kc, vc.repeat(2, 1, 1, 1, 1)[::2], torch.tensor([0]))


def test_floor_and_fused_write_touch_the_same_bytes():
    """Cross-check against the kernel itself, not only the mask formula."""
    gen = torch.Generator().manual_seed(7)
    H, D, page, n_blocks, T = 2, 32, 32, 8, 100
    loc = loc_pattern("mixed", T, n_blocks * page, page, gen=gen)
    k = torch.randn(T, H, D, generator=gen).to(torch.bfloat16)
    v = torch.randn(T, H, D, generator=gen).to(torch.bfloat16)
    changed = []
    for writer in ("fused", "floor"):
        masks = []
        for fill in (0, 255):  # a byte counts as written when it moved from either fill
            kc = torch.full((n_blocks, H, D // 16, page, 16), fill, dtype=torch.uint8, device=DEVICE)
            vc = torch.full((n_blocks, H, page // 16, D, 16), fill, dtype=torch.uint8, device=DEVICE)
            if writer == "fused":
                fp8_write.write_kv_fp8(k.to(DEVICE), v.to(DEVICE), kc, vc, loc.to(DEVICE), 1.0, 1.0,
                                       fp8_dtype=torch.float8_e4m3fn)
            else:
                store_floor.StoreFloor(kc, vc, loc.to(DEVICE))()
            masks.append((kc.cpu() != fill, vc.cpu() != fill))
        changed.append((masks[0][0] | masks[1][0], masks[0][1] | masks[1][1]))
    assert torch.equal(changed[0][0], changed[1][0]) and torch.equal(changed[0][1], changed[1][1])
