"""Audit of issue 29's claims (claims-29): each test failed on the merged code and names the claim it breaks."""

from __future__ import annotations

import pytest

from tests.fake_model import FakeModel
from tests.personal_helpers import Script, stage_cfg


@pytest.mark.parametrize("sharing", ["Shared", " shared", "shared ", "SHARED", "\tshared\n"])
def test_only_the_exact_shared_policy_shares(sharing):
    """Claim 5: the paper's Eq. 1 shares when s = "shared"; a policy spelled otherwise is malformed, so private
    in the rule, the index's unit and the view alike (fail closed, never a lenient parse that opens)."""
    from harness.kernel import MemoryItem, unit_visible, visible
    from harness.memory.views import View

    assert visible("a2", sharing, "a1") is False
    u = MemoryItem("user", "a2", "profile", sharing, {"field": "tools", "value": "vim"}).unit()
    assert u.visibility == "private" and unit_visible(u.owner, u.visibility, "a1") is False
    assert View("user", "a1", "shared").admits(u) is False
