"""Compiled translation catalogs, built from the committed ``.po`` files.

The ``.mo`` files are build products, so they are not committed: ``compile_catalogs``
writes each one whose ``.po`` is newer, in pure Python (polib), so neither the demo nor
the tests need GNU gettext installed. ``make run``, ``make test``, the test run itself
and the production image call it through ``manage.py compile_translations``.
"""

from pathlib import Path

import polib
from django.conf import settings


def catalogs() -> list[Path]:
    found: list[Path] = []
    for base in settings.LOCALE_PATHS:
        found += sorted(Path(base).glob("*/LC_MESSAGES/*.po"))
    return found


def compile_catalogs(*, force: bool = False) -> list[Path]:
    """Write the ``.mo`` of every stale catalog; returns the ones written."""
    written = []
    for po_path in catalogs():
        mo_path = po_path.with_suffix(".mo")
        if not force and mo_path.exists() and mo_path.stat().st_mtime >= po_path.stat().st_mtime:
            continue
        catalog = polib.pofile(str(po_path))
        tmp = mo_path.with_suffix(".mo.tmp")
        catalog.save_as_mofile(str(tmp))
        tmp.replace(mo_path)
        written.append(mo_path)
    return written
