"""Names a reader cannot tell apart are refused; an environment's kind is never guessed (issue 23).

`environments: [Native, Container]` once became two *container* environments silently paired as an A/A twin.
Now: a name that is not exactly a kind and declares no kind (nor docker flags / a variant) is refused, and two
names of a list that differ only by case, spaces or invisible characters are refused naming both spellings.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings as defs
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

BASE = {"name": "c", "models": ["llama"], "environments": ["native"], "workloads": ["T1"]}

#: Ways of spelling a name so that a reader sees the same name.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u202e", "\x07"]
SPACES = [" ", "\u00a0", "\u2009", "\u3000", "\t"]


def _problems(campaign):
    with pytest.raises(CampaignError) as err:
        resolve(campaign)
    return err.value.problems


def test_capitalised_kinds_are_refused_not_turned_into_containers():
    problems = _problems({**BASE, "environments": ["Native", "Container"]})
    assert any(p.startswith("campaign.environments[0]: 'Native' is not an environment kind") and "'native'" in p
               for p in problems), problems
    assert any(p.startswith("campaign.environments[1]: 'Container'") for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_a_name_that_is_no_kind_needs_a_kind_or_docker_settings():
    assert _problems({**BASE, "environments": ["native", {"name": "gpu-docker"}]})[0].startswith(
        "campaign.environments[1]: 'gpu-docker' is not an environment kind")
    for declared in ({"kind": "container"}, {"docker_flags": ["--ipc=host"]}, {"variant": "study"}):
        env = resolve({**BASE, "environments": ["native", {"name": "gpu-docker", **declared}]})["environments"][1]
        assert env["kind"] == "container"
    assert resolve({**BASE, "environments": [{"name": "Native", "kind": "native"}]})["environments"][0]["kind"] \
        == "native"


def test_the_exact_kinds_and_their_twins_keep_working():
    envs = resolve({**BASE, "environments": ["native", "container", "bare", "native"]})["environments"]
    assert [(e["name"], e["kind"]) for e in envs] == [("native", "native"), ("container", "container"),
                                                      ("bare", "bare"), ("native.aa", "native")]


def _variant(draw, name):
    """A spelling of ``name`` that differs only by case, surrounding/inner spaces or invisible characters."""
    out = name
    while out == name:
        chars = [c.upper() if draw(st.booleans()) else c for c in name]
        pos = draw(st.integers(0, len(chars)))
        if draw(st.booleans()):
            chars.insert(pos, draw(st.sampled_from(INVISIBLE)))
        if draw(st.booleans()):
            chars.append(draw(st.sampled_from(SPACES)))
        if draw(st.booleans()):
            chars.insert(0, draw(st.sampled_from(SPACES)))
        out = "".join(chars)
        if out == name:
            out = name + "\u200b"
    return out


@st.composite
def confusable(draw):
    name = draw(st.from_regex(r"[a-z][a-z0-9._-]{0,8}", fullmatch=True))
    other = _variant(draw, name)
    field = draw(st.sampled_from(["models", "environments", "workloads"]))
    first, second = draw(st.permutations([name, other]))
    if field == "models":
        entries = [first, second]
    elif field == "environments":
        entries = [{"name": first, "kind": "native"}, {"name": second, "kind": "container"}]
    else:
        entries = [{"name": first, "preset": "T1"}, {"name": second, "preset": "T2"}]
    return {**BASE, field: entries}, field, first, second


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(confusable())
def test_names_that_differ_only_by_case_spaces_or_invisible_characters_are_refused(case):
    campaign, field, first, second = case
    problems = _problems(campaign)
    named = [p for p in problems if p.startswith(f"campaign.{field}[1].name: ")]
    assert named, problems
    both = [p for p in named if repr(first) in p and repr(second) in p]
    assert both, (first, second, problems)  # one line naming the field and both spellings
    assert all("\n" not in p for p in problems)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=12))
def test_any_environment_name_is_either_exactly_a_kind_or_refused_without_a_kind(name):
    """A bare name never becomes a kind it does not spell exactly."""
    try:
        env = resolve({**BASE, "environments": [name]})["environments"][0]
    except CampaignError as err:
        assert all(p.startswith("campaign.environments[0]") for p in err.problems), err.problems
        return
    assert name in defs.ENVIRONMENT_KINDS and env == {**env, "name": name, "kind": name}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,6}", fullmatch=True), min_size=1, max_size=4))
def test_names_distinct_to_a_reader_are_accepted(names):
    keys = [defs.name_key(n) for n in names]
    campaign = {**BASE, "models": names}
    if len(set(keys)) == len(keys):
        assert [m["name"] for m in resolve(campaign)["models"]] == names
    else:
        with pytest.raises(CampaignError):
            resolve(campaign)
