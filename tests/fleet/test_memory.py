"""The router's memory of what it sent where (`PrefixMemory`)."""

from __future__ import annotations

from radixflow.fleet.memory import PrefixMemory


def test_the_deepest_prefix_sent_to_each_replica():
    memory = PrefixMemory()
    memory.record([1, 2, 3], "a")
    memory.record([1, 2], "b")
    assert memory.depths([1, 2, 3, 4], 16) == {"a": 48, "b": 32}
    assert memory.depths([9], 16) == {}


def test_a_forgotten_replica_counts_again_only_for_what_is_sent_after():
    memory = PrefixMemory()
    memory.record([1, 2, 3], "a")
    memory.record([1], "b")
    memory.forget("a")
    assert memory.depths([1, 2, 3], 16) == {"b": 16}
    memory.record([1, 2], "a")  # a replacement under the same name
    assert memory.depths([1, 2, 3], 16) == {"a": 32, "b": 16}
    memory.forget("a")
    memory.forget("a")  # twice, and a name never seen: nothing breaks
    memory.forget("z")
    assert memory.depths([1, 2, 3], 16) == {"b": 16}


def test_the_least_recently_routed_prefixes_go_first():
    memory = PrefixMemory(capacity=3)
    memory.record([1, 2], "a")
    memory.record([3], "b")
    memory.record([1], "c")  # 1 is routed again: 2 is now the oldest
    memory.record([4], "d")
    assert len(memory) == 3
    assert memory.depths([1, 2], 16) == {"a": 16, "c": 16}
    assert memory.depths([3], 16) == {"b": 16} and memory.depths([4], 16) == {"d": 16}


def test_a_retracted_send_stops_counting_and_no_other_does():
    # a replica that refused a prompt (429, 503) never cached it: its siblings must not follow it
    # there, while what other prompts sent there with the same prefix still counts
    memory = PrefixMemory()
    memory.record([1, 2, 3], "a")
    memory.record([1, 2], "a")  # a sibling, sent there too
    memory.record([1, 2, 3], "b")
    memory.retract([1, 2, 3], "a")  # the first one was refused
    assert memory.depths([1, 2, 3], 16) == {"a": 32, "b": 48}
    memory.retract([1, 2], "a")  # and the sibling
    assert memory.depths([1, 2, 3], 16) == {"b": 48}
    memory.retract([1, 2], "a")  # nothing recorded there any more, nor at z: nothing changes
    memory.retract([1, 2], "z")
    assert memory.depths([1, 2, 3], 16) == {"b": 48}
    memory.retract([1, 2, 3], "b")
    assert memory.depths([1, 2, 3], 16) == {} and len(memory) == 0


def test_a_retract_after_its_replica_was_forgotten_changes_nothing():
    memory = PrefixMemory()
    memory.record([1, 2], "a")
    memory.record([1], "b")
    memory.forget("a")  # it left (Serve's replica ids are never reused)
    memory.retract([1, 2], "a")  # a refusal heard after it left
    assert memory.depths([1, 2], 16) == {"b": 16}
