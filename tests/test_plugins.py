"""Registering an entry from outside the package (docs/extending.md): `register` refuses a name
the registry has, in one line, where assigning it would replace the built-in entry silently."""

from __future__ import annotations

import pytest

from radixflow.cache.eviction import EVICTION_POLICIES
from radixflow.costmodel.shape.config_readers import READERS
from radixflow.fleet.routers import ROUTERS
from radixflow.models.registry import FAMILIES
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

REGISTRIES = (SCHEDULING_POLICIES, PLACEMENTS, ADMISSIONS, EVICTION_POLICIES, ROUTERS, FAMILIES, READERS)


class Mine(Native):
    name = "mine"


def test_registering_a_taken_name_is_refused_in_one_line_and_the_entry_kept():
    with pytest.raises(ValueError) as caught:
        SCHEDULING_POLICIES.register("native", Mine)
    said = str(caught.value)
    assert "\n" not in said
    assert "scheduling policy 'native' is registered already (Native)" in said
    assert SCHEDULING_POLICIES["native"] is Native


def test_every_registry_registers_a_new_name_and_refuses_it_twice():
    for registry in REGISTRIES:
        saved = dict(registry)
        try:
            assert registry.register("mine", Mine) is Mine
            assert registry["mine"] is Mine
            with pytest.raises(ValueError, match="'mine' is registered already"):
                registry.register("mine", Native)
            assert registry["mine"] is Mine
        finally:
            registry.clear()
            registry.update(saved)


@pytest.mark.parametrize("name", ["", "a@b", "a+b", 3])
def test_a_name_no_door_can_spell_is_refused(name):
    # an experiment's variant is `policy@placement+eviction+admission`: a name holding '@' or '+'
    # could never be named there
    with pytest.raises(ValueError) as caught:
        SCHEDULING_POLICIES.register(name, Mine)
    assert "\n" not in str(caught.value)
    assert name not in SCHEDULING_POLICIES


def test_the_registries_stay_plain_dicts():
    for registry in REGISTRIES:
        assert isinstance(registry, dict)
