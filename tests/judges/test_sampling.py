"""The stratified sample of rows to label: every judge level represented, seeded, bounded."""

from collections import Counter

from beameval.judges.sampling import StratifiedSampler


def test_equal_shares_and_the_remainder_of_a_small_stratum_goes_to_the_others():
    sampler = StratifiedSampler(30, seed=1)
    for i in range(1000):
        sampler.add("good" if i % 10 else ("bad" if i % 20 else "ok"), i)  # 900 good, 50 bad, 50 ok
    sampler.add("rare", -1)
    chosen = sampler.result()
    assert len(chosen) == 30 and len(set(chosen)) == 30
    strata = Counter("rare" if i == -1 else "good" if i % 10 else ("bad" if i % 20 else "ok") for i in chosen)
    # 30 // 4 = 7 each, "rare" has 1; the 8 left go 2 each to the open strata, then 1 each in sorted order
    assert strata == {"rare": 1, "bad": 10, "good": 10, "ok": 9}
    assert sampler.counts() == {"good": 900, "bad": 50, "ok": 50, "rare": 1}


def test_the_same_seed_gives_the_same_sample_and_memory_is_bounded():
    def sample(seed):
        sampler = StratifiedSampler(5, seed=seed)
        for i in range(10_000):
            sampler.add(i % 3, i)
        assert all(len(r) <= 5 for r in sampler._reservoirs.values())
        return sampler.result()

    assert sample(3) == sample(3) != sample(4)


def test_fewer_rows_than_asked_gives_them_all():
    sampler = StratifiedSampler(50)
    for i in range(7):
        sampler.add(i % 2, i)
    assert sorted(sampler.result()) == list(range(7))
