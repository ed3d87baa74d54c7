"""Every page reads in Simplified Chinese: the catalog translates every marked string,
keeps each placeholder, and the language can be chosen from the user menu."""

import re
import shutil
import subprocess
from pathlib import Path

import polib
from django.conf import settings
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
PLACEHOLDER = re.compile(r"%\((\w+)\)[sdf]|%\(\w+\)\.\d+f|\{\w*\}|%%")


def entries():
    return [e for e in polib.pofile(str(CATALOG)) if not e.obsolete]


def test_every_string_is_translated_and_none_is_fuzzy():
    untranslated = [
        e.msgid
        for e in entries()
        if "fuzzy" in e.flags
        or not (e.msgstr or (e.msgstr_plural and all(e.msgstr_plural.values())))
    ]
    assert untranslated == []


def test_every_translation_keeps_its_placeholders():
    broken = []
    for e in entries():
        wanted = sorted(PLACEHOLDER.findall(e.msgid))
        for text in [e.msgstr] if not e.msgid_plural else list(e.msgstr_plural.values()):
            if sorted(PLACEHOLDER.findall(text)) != wanted:
                broken.append((e.msgid, text))
    assert broken == []


def test_the_catalog_has_every_string_marked_in_the_code(tmp_path):
    """A new string marked for translation must be added to the catalog and translated
    (``make messages``)."""
    for name in ("portal", "rental", "billing", "templates", "static", "manage.py"):
        source = ROOT / name
        target = tmp_path / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    (tmp_path / "locale").mkdir()
    # GNU gettext's xgettext reads the sources; tools/ensure-test-tools installs it.
    subprocess.run(["xgettext", "--version"], check=True, capture_output=True)
    from django.core.management import call_command

    with settings_locale(tmp_path):
        call_command("makemessages", locale=["zh_Hans"], no_location=True, verbosity=0)
    fresh = {e.msgid for e in polib.pofile(str(tmp_path / "locale/zh_Hans/LC_MESSAGES/django.po"))}
    known = {e.msgid for e in entries()}
    assert sorted(fresh - known) == [], "run `make messages` and translate the new strings"


class settings_locale:
    """Run makemessages over a copy of the sources, writing into the copy."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __enter__(self):
        import os

        self.cwd = os.getcwd()
        os.chdir(self.root)
        self.paths = settings.LOCALE_PATHS
        settings.LOCALE_PATHS = [self.root / "locale"]

    def __exit__(self, *exc):
        import os

        os.chdir(self.cwd)
        settings.LOCALE_PATHS = self.paths


def test_it_serves_pages_in_chinese_when_the_browser_asks(f0):
    user = f0.alice
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-Hans,zh;q=0.9")
    client.force_login(user)
    html = client.get("/").content.decode()
    assert 'lang="zh-hans"' in html
    assert "概览" in html and "申请 GPU" in html
    assert "Dashboard" not in html


def test_it_switches_language_from_the_user_menu(f0):
    user = f0.alice
    client = Client()
    client.force_login(user)
    html = client.get("/").content.decode()
    assert "Dashboard" in html and 'value="zh-hans"' in html
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/leases/"})
    assert response.status_code == 302 and response["Location"] == "/leases/"
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    html = client.get("/leases/").content.decode()
    assert "租约" in html and 'value="en"' in html
