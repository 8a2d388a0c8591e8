"""When the advisor looks at a predicted effect again: every RETRY_S, sooner when it expires, later while its window is
too short; and a limit still held keeps the effect it was shown with."""

from __future__ import annotations

from kvdoctor.verdicts import Effect
from kvdoctor.whatif.effectcache import RETRY_S, EffectCache, Key

KEY = Key("a", (("replicas", 2),))


def _effect(t: float) -> Effect:
    return Effect({"replicas": 2}, {}, {}, "", t=t)


def _never(eff: Effect) -> float:
    return eff.t + 1e9


def test_a_new_key_is_looked_at_once_then_again_retry_s_after_its_effect():
    cache = EffectCache()
    assert cache.look(KEY, 0.0)
    assert cache.put(KEY, _effect(0.0), 0.0, None, None, _never) == _effect(0.0)
    assert not cache.look(KEY, 1.0) and not cache.look(KEY, RETRY_S - 1)
    assert cache.look(KEY, RETRY_S)
    assert cache.get(KEY) == _effect(0.0)  # shown until the next look puts another


def test_an_effect_that_expires_sooner_is_looked_at_when_it_expires():
    cache = EffectCache()
    cache.look(KEY, 0.0)
    cache.put(KEY, _effect(0.0), 100.0, None, None, lambda eff: eff.t + 110.0)
    assert not cache.look(KEY, 109.0)
    assert cache.look(KEY, 110.0)


def test_a_key_without_an_effect_is_retried_retry_s_after_it_was_asked():
    cache = EffectCache()
    cache.look(KEY, 10.0)
    assert cache.put(KEY, None, 10.0, None, None, _never) is None
    assert not cache.look(KEY, 10.0 + RETRY_S - 1)
    assert cache.look(KEY, 10.0 + RETRY_S)
    cache.fail(KEY)  # a look that raised: the same retry
    assert not cache.look(KEY, 10.0 + 2 * RETRY_S - 1)
    assert cache.look(KEY, 10.0 + 2 * RETRY_S)


def test_a_window_found_too_short_is_looked_at_again_once_it_is_long_enough():
    cache = EffectCache()
    cache.look(KEY, 0.0)
    cache.put(KEY, None, 0.0, 45.0, None, _never)  # its steady stretch will be long enough at 45 s
    assert not cache.look(KEY, RETRY_S)
    assert cache.look(KEY, 45.0)


def test_a_limit_still_held_keeps_its_effect_while_the_window_is_too_short():
    cache = EffectCache()
    cache.look(KEY, 0.0)
    cache.put(KEY, _effect(0.0), 0.0, None, None, _never)
    # a queue draining: the window is too short again, but the limit judged at 0 s has held since -10 s
    assert cache.put(KEY, None, 30.0, 60.0, -10.0, _never) == _effect(0.0)
    assert not cache.look(KEY, 50.0) and cache.look(KEY, 60.0)
    # a limit that began after the effect was simulated is another limit: nothing stands for it
    assert cache.put(KEY, None, 60.0, 90.0, 40.0, _never) is None


def test_ask_notes_a_key_at_most_once_every_period():
    cache = EffectCache()
    assert cache.ask(KEY, 0.0, 30.0)
    assert not cache.ask(KEY, 29.0, 30.0)
    assert cache.ask(KEY, 30.0, 30.0)


def test_forget_drops_every_key_of_the_target_and_no_other():
    cache, other = EffectCache(), Key("b", (("replicas", 2),))
    for key in (KEY, other):
        cache.look(key, 0.0)
        cache.put(key, _effect(0.0), 0.0, None, None, _never)
    cache.forget("a")
    assert list(cache) == [other] and len(cache) == 1
    assert cache.look(KEY, 1.0)  # asked anew, as a target never seen
