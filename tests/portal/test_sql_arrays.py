"""``AnyOf`` finds exactly the rows ``__in`` finds, with one parameter whatever the list's
length, for integer and text columns; an empty list sends no query."""

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from portal.sql_arrays import AnyOf
from rental.models import GpuModel
from tests import factories

pytestmark = pytest.mark.django_db


def test_it_finds_what_in_finds_with_one_parameter():
    models = [factories.gpu_model(f"Model {n}") for n in range(6)]
    wanted = [models[1].pk, models[4].pk, 999_999]
    with CaptureQueriesContext(connection) as seen:
        found = set(GpuModel.objects.filter(AnyOf(F("pk"), wanted)).values_list("pk", flat=True))
    assert found == set(GpuModel.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    assert found == {models[1].pk, models[4].pk}
    assert "ANY(" in seen.captured_queries[0]["sql"]
    names = ["Model 2", "Model 5"]
    assert set(GpuModel.objects.filter(AnyOf(F("name"), names)).values_list("name", flat=True)) == {
        "Model 2",
        "Model 5",
    }


def test_an_empty_list_matches_nothing_without_a_query():
    factories.gpu_model("Model 0")
    with CaptureQueriesContext(connection) as seen:
        assert list(GpuModel.objects.filter(AnyOf(F("pk"), []))) == []
    assert seen.captured_queries == []
