"""A policy added from outside the package (docs/extending.md): what a registry entry that cannot
serve is told, where it is built, in one line naming the option; never a traceback mid-run."""

from __future__ import annotations

import pytest

from radixflow.cache.eviction import EVICTION_POLICIES, LRU, EntrySizes, make_eviction_policy
from radixflow.problems import ProblemError
from radixflow.scheduler.admission import ADMISSIONS, make_admission
from radixflow.scheduler.placement import PLACEMENTS, make_placement
from radixflow.scheduler.policy import FCFS, SCHEDULING_POLICIES, Native, default_placement, make_policy


class NoOnBlocked(FCFS):  # FCFS is a base: it has no `name` nor `on_blocked` of its own
    name = "no-on-blocked"


class NoPlacementAttr:
    name = "bare"


class TypoPlacement(Native):
    name = "typo"
    placement = "brnach"


class NoSizes(LRU):
    def __init__(self) -> None:  # an eviction factory is called with the entry sizes
        pass


class NoPositions:
    name = "no-positions"


class NoMayEvict:
    name = "no-may-evict"


def _refused(build, param: str, *words: str) -> None:
    with pytest.raises(ProblemError) as caught:
        build()
    assert caught.value.problem.param == param
    said = str(caught.value)
    assert "\n" not in said
    for word in words:
        assert word in said


def test_a_policy_lacking_a_protocol_method_is_refused_where_it_is_built(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "nob", NoOnBlocked)
    _refused(lambda: make_policy("nob"), "policy", "'nob'", "NoOnBlocked", "on_blocked")


def test_a_policy_registered_as_an_instance_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "inst", Native())
    _refused(lambda: make_policy("inst"), "policy", "'inst'", "not a class")


def test_a_policy_without_a_placement_of_its_own_is_refused(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "bare", NoPlacementAttr)
    _refused(lambda: default_placement("bare"), "policy", "'bare'", "placement")


def test_a_policy_naming_an_unregistered_placement_is_refused(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "typo", TypoPlacement)
    _refused(lambda: make_policy("typo"), "policy", "'brnach'", "branch")
    _refused(lambda: default_placement("typo"), "policy", "'brnach'")


def test_an_eviction_factory_that_takes_no_sizes_is_refused(monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "nosizes", NoSizes)
    _refused(lambda: make_eviction_policy("nosizes", EntrySizes()), "eviction", "'nosizes'", "sizes")


def test_an_eviction_policy_lacking_a_member_is_refused(monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "half", lambda sizes: NoPositions())
    _refused(lambda: make_eviction_policy("half"), "eviction", "'half'", "priority", "clock")


def test_a_placement_or_admission_lacking_its_method_is_refused(monkeypatch):
    monkeypatch.setitem(PLACEMENTS, "nop", NoPositions)
    monkeypatch.setitem(ADMISSIONS, "nom", NoMayEvict)
    _refused(lambda: make_placement("nop"), "placement", "'nop'", "positions")
    _refused(lambda: make_admission("nom"), "admission", "'nom'", "may_evict")


def test_the_built_in_entries_all_serve():
    for name in SCHEDULING_POLICIES:
        assert make_policy(name).placement == default_placement(name)
    for name in EVICTION_POLICIES:
        make_eviction_policy(name, EntrySizes())
    for name in PLACEMENTS:
        make_placement(name)
    for name in ADMISSIONS:
        make_admission(name)
