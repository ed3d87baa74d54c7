"""In headless Chromium: an admin sets up the identity provider (the client secret is
never shown back) and maps a group to a project's manager role, in the admin. The
operations guide's screenshots come from here (PORTAL_DOCS_SCREENSHOTS=1)."""

import pytest

from portal.sso.models import GroupRole, IdentityProvider
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_agent_pages import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_up_the_provider_and_a_group_role(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    f0.admin.is_superuser = True  # the admin site's models, as the portal's admins have them
    f0.admin.save(update_fields=["is_superuser"])
    provider = IdentityProvider(
        name="Company SSO", issuer="https://idp.example.com", client_id="gpu-portal"
    )
    provider.set_client_secret("never-shown-back-1234")
    provider.save()
    GroupRole.objects.create(group="ml-alpha-leads", role="manager", project=f0.alpha)
    GroupRole.objects.create(group="gpu-admins", role="admin")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, f0.admin.username)
    page.goto(f"{live_server.url}/admin/sso/identityprovider/{provider.pk}/change/")
    expect(page.locator("#id_issuer")).to_have_value("https://idp.example.com")
    assert "never-shown-back" not in page.content()
    screenshot(page, "admin-identity-provider", guide="admin-identity-provider")
    page.goto(f"{live_server.url}/admin/sso/grouprole/")
    expect(page.locator("body")).to_contain_text("ml-alpha-leads")
    screenshot(page, "admin-group-roles", guide="admin-group-roles")
