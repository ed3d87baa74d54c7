"""``manage.py load_exchange_rates``: all or nothing, each bad row named on a line of its
own, a clear one-line error for a file it cannot read, and a non-zero exit for any of it."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from portal.models import AuditEvent
from rental.models import ExchangeRate

ROOT = Path(__file__).resolve().parents[3]
HEADER = "currency,units_per_billing_unit,valid_from,source\n"


def load(path: Path) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("load_exchange_rates", str(path), stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(path: Path) -> tuple[str, str]:
    """The command's error line and what it wrote on stderr before it."""
    err = io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command("load_exchange_rates", str(path), stdout=io.StringIO(), stderr=err)
    return str(error.value), err.getvalue()


def test_it_loads_a_good_file(db, tmp_path):
    good = tmp_path / "rates.csv"
    good.write_text(HEADER + "CNY,7.25,2026-04-01,PBOC\nEUR,0.92,2026-04-01T00:00:00+02:00,ECB\n")
    out, _err = load(good)
    assert "Loaded 2 exchange rate(s)." in out
    eur = ExchangeRate.objects.get(currency="EUR")
    assert eur.valid_from.isoformat() == "2026-03-31T22:00:00+00:00"
    assert AuditEvent.objects.filter(verb="exchange_rate.added").count() == 2


def test_it_names_every_bad_row_on_a_line_of_its_own_and_loads_nothing(db, tmp_path):
    bad = tmp_path / "rates.csv"
    bad.write_text(
        HEADER
        + "CNY,7.25,2026-04-01,PBOC\n"  # line 2: good, and not kept either
        + "EUR,1e26,2026-04-01,ECB\n"  # line 3: past what a rate may be
        + "GBP,0.8,someday,BoE\n"  # line 4: no date
        + "JPY,150,2026-04-01\n"  # line 5: a column short
        + "CHF,0.9,2026-04-01,\u202eevil\n"  # line 6: a bidi control in the source
        + "CNY,7.30,2026-04-01,again\n"  # line 7: the same moment as line 2
        + "AUD,1.5,9999-12-31T23:00:00-15:00,far\n"  # line 8: past what UTC holds
    )
    message, err = refused(bad)
    lines = err.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
        "line 8",
    ]
    assert lines[0].startswith("line 3: units_per_billing_unit: Enter a number from 0 to")
    assert lines[1].startswith("line 4: valid_from: ")
    assert lines[2].startswith("line 5: expected 4 columns")
    assert lines[3].startswith("line 6: source: ") and "U+202E" in lines[3]
    assert lines[4].startswith("line 7: valid_from: CNY already has a rate")
    assert lines[5].startswith("line 8: valid_from: ")
    assert message == "6 bad row(s) of 7; nothing was loaded."
    assert not ExchangeRate.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "no exchange rates in the file"),
        (HEADER.encode(), "no exchange rates in the file"),
        (b"\n\n  ,  ,,\n", "no exchange rates in the file"),
        (HEADER.encode() + b"CNY,7.25,2026-04-01,caf\xe9\n", "line 2: not UTF-8 text (byte"),
    ],
)
def test_it_refuses_a_file_without_rates_or_not_utf8_in_one_line(db, tmp_path, content, says):
    path = tmp_path / "rates.csv"
    path.write_bytes(content)
    message, err = refused(path)
    assert says in message and "nothing was loaded" in message
    assert "\n" not in message and err == ""
    assert not ExchangeRate.objects.exists()


def test_it_exits_non_zero_with_the_lines_and_no_traceback(db, tmp_path):
    bad = tmp_path / "rates.csv"
    bad.write_text(HEADER + "EUR,1e26,2026-04-01,ECB\nGBP,-1,2026-04-01,BoE\n")
    db = connection.settings_dict  # the test database: its tables, none of its rows
    result = subprocess.run(
        [sys.executable, "manage.py", "load_exchange_rates", str(bad)],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[:2] == [
        line for line in result.stderr.splitlines() if line.startswith("line ")
    ]
    assert "CommandError: 2 bad row(s) of 2; nothing was loaded." in result.stderr
