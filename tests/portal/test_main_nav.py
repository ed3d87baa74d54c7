"""The main navigation is drawn once per language, page and roles and kept
(``portal_tags.main_nav``): what a page shows is what drawing it afresh shows, the current
page is the one marked, each role sees its own links, and each language its own words."""

import re

import pytest
from django.urls import reverse

from portal.templatetags import portal_tags


def nav_of(page) -> str:
    return re.search(r'<nav class="mainnav".*?</nav>', page.content.decode(), re.S).group(0)


def marked(nav: str) -> list[str]:
    return re.findall(r'href="([^"]+)" aria-current="page"', nav)


@pytest.mark.django_db
def test_each_page_marks_itself_and_each_role_sees_its_links(f0, client):
    client.force_login(f0.alice)
    projects, leases = reverse("rental:projects"), reverse("rental:leases")
    assert marked(nav_of(client.get(projects))) == [projects]
    assert marked(nav_of(client.get(leases))) == [leases]
    assert marked(nav_of(client.get(reverse("rental:project", args=["alpha"])))) == [projects]
    engineer_nav = nav_of(client.get(projects))
    client.force_login(f0.admin)
    admin_nav = nav_of(client.get(projects))
    assert reverse("audit_log") in admin_nav and reverse("audit_log") not in engineer_nav
    assert reverse("rental:lease_new") in engineer_nav
    client.force_login(f0.outsider)  # a member of nothing: no request, no leases
    assert reverse("rental:lease_new") not in nav_of(client.get(projects))


@pytest.mark.django_db
def test_each_language_has_its_words(f0, client):
    client.force_login(f0.alice)
    english = nav_of(client.get(reverse("rental:projects")))
    client.cookies["django_language"] = "zh-hans"
    chinese = nav_of(client.get(reverse("rental:projects")))
    assert ">Projects<" in english and ">Projects<" not in chinese and "项目" in chinese


@pytest.mark.django_db
def test_the_kept_navigation_is_the_one_drawn_afresh(f0, client, settings):
    client.force_login(f0.alpha_manager)
    portal_tags._kept_nav.cache_clear()
    for path in (reverse("rental:projects"), reverse("dashboard"), reverse("rental:leases")):
        kept = [nav_of(client.get(path)) for _ in range(2)]
        settings.DEBUG = True  # drawn every time
        fresh = nav_of(client.get(path))
        settings.DEBUG = False
        assert kept[0] == kept[1] == fresh, path
    assert portal_tags._kept_nav.cache_info().hits >= 3
    assert client.get("/no-such-page/").status_code == 404  # no page, no view: still drawn
