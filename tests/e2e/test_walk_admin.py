"""admin walks every page admin can reach, in both languages at both widths (tests/e2e/walk.py)."""

import pytest

from tests.e2e.walk import walk

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_walks_every_page_in_both_languages_at_both_widths(live_server, browser):
    walk("admin", live_server, browser)
