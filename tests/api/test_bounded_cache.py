"""The app's one bounded cache (app/cache.py): least recently used entries go first, past its count
or its bytes; the newest entry stays unless shed; its byte count is that of the entries it holds,
also when threads share it."""

from __future__ import annotations

import threading

from pagedviz.app.cache import BoundedCache


def test_the_least_recently_used_entry_goes_first_past_the_count() -> None:
    cache: BoundedCache[str, int] = BoundedCache(max_items=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a use: b is now the least recently used
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"] and "b" not in cache and cache.get("b") is None
    assert cache.peek("a") == 1  # no use: a stays the least recently used
    cache.put("d", 4)
    assert cache.keys() == ["c", "d"]


def test_bytes_count_what_is_held_and_bound_it() -> None:
    cache: BoundedCache[str, str] = BoundedCache(max_bytes=100)
    cache.put("a", "x", 40)
    cache.put("b", "y", 40)
    cache.put("a", "z", 50)  # replaces a: its old bytes leave the count
    assert cache.nbytes == 90 and cache["a"] == "z" and len(cache) == 2
    cache.put("c", "w", 30)  # over 100: b, the least recently used, goes
    assert cache.keys() == ["a", "c"] and cache.nbytes == 80
    assert cache.pop("a") == "z" and cache.pop("a") is None and cache.nbytes == 30


def test_the_newest_entry_stays_even_alone_over_the_bound_unless_shed() -> None:
    kept: BoundedCache[str, str] = BoundedCache(max_bytes=10)
    kept.put("old", "x", 5)
    kept.put("big", "y", 50)
    assert kept.keys() == ["big"] and kept.nbytes == 50
    kept.shed(0)
    assert len(kept) == 0 and kept.nbytes == 0 and not kept
    strict: BoundedCache[str, str] = BoundedCache(max_bytes=10, keep_newest=False)
    strict.put("big", "y", 50)
    assert len(strict) == 0 and strict.nbytes == 0


def test_shed_drops_the_least_recently_used_down_to_a_bound() -> None:
    cache: BoundedCache[int, int] = BoundedCache()
    for i in range(5):
        cache.put(i, i, 10)
    cache.touch(0)
    cache.shed(25)
    assert cache.keys() == [4, 0] and cache.nbytes == 20
    assert cache.items() == [(4, 4), (0, 0)] and cache.values() == [4, 0]


def test_threads_sharing_a_cache_keep_its_count_and_bytes_true() -> None:
    cache: BoundedCache[tuple[int, int], int] = BoundedCache(max_items=50, max_bytes=4000)

    def work(t: int) -> None:
        for i in range(2000):
            cache.put((t, i % 97), i, 1 + i % 90)
            cache.get((t, (i * 7) % 97))
            if i % 13 == 0:
                cache.pop((t, (i * 3) % 97))
            if i % 101 == 0:
                cache.shed(2000)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sizes = {k: 1 + v % 90 for k, v in cache.items()}
    assert len(cache) <= 50 and cache.nbytes <= 4000
    assert cache.nbytes == sum(sizes.values())
